import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Headers,
  HttpException,
  Injectable,
  type INestApplication,
  Module,
  type NestInterceptor,
  Post,
  RequestTimeoutException,
  StreamableFile,
} from '@nestjs/common';
import { Readable } from 'node:stream';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import { type DataSource, type EntityManager } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../lib/index.js';
import { type AdapterName, bootstrapTestApp } from '../support/bootstrap.js';
import { type HandlerProgram, type Op } from './handler-program.js';

export const FUZZ_APPLICATION_NAME = 'fuzz-app';

/** The app's tables: effects without a unique key, so that a write applied twice shows. */
export const FUZZ_DDL = `
  CREATE TABLE IF NOT EXISTS fuzz_effects (program text NOT NULL, path text NOT NULL);
  CREATE TABLE IF NOT EXISTS fuzz_later (program text NOT NULL, path text NOT NULL);
  CREATE TABLE IF NOT EXISTS fuzz_unique (k text PRIMARY KEY);
  INSERT INTO fuzz_unique (k) VALUES ('taken') ON CONFLICT DO NOTHING;`;

/** Faults the driver asks of one attempt, by header (headers are not fingerprinted). */
export const OUTER_TIMEOUT_HEADER = 'x-fuzz-timeout-ms';
export const STATEMENT_TIMEOUT_HEADER = 'x-fuzz-statement-timeout-ms';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One attempt of a program, as the handler runs it. */
interface Run {
  id: string;
  /** The statement-timeout fault, set before the first `pg_sleep` (then 0). */
  statementTimeoutMs: number;
}

/** Programs whose failing stream has failed once in this process: the next attempt completes. */
const streamsFailed = new Set<string>();

/** The answer as a stream: `stream:` then the id, or an error midway on its first attempt. */
function streamOf(id: string, fail: boolean): StreamableFile {
  const failNow = fail && !streamsFailed.has(id);
  if (failNow) streamsFailed.add(id);
  return new StreamableFile(
    Readable.from(
      (async function* () {
        yield Buffer.from('stream:');
        await sleep(5);
        if (failNow) throw new Error('the stream failed midway');
        yield Buffer.from(id);
      })(),
    ),
  );
}

/** A thrown error of the program's own: what its `tx … throw` ops throw. */
class ProgramError extends Error {}

/**
 * What the program's `catch` blocks swallow: the failures it causes itself (a unique violation,
 * the transaction aborted by one, its own thrown error). A timeout or a lost connection goes
 * through, as in an app that catches what it expects: the model covers such apps.
 */
function expected(error: unknown): boolean {
  if (error instanceof ProgramError) return true;
  const code = (error as { code?: unknown; driverError?: { code?: unknown } }).code;
  return code === '23505' || code === '25P02';
}

/** The outer timeout a global interceptor applies, when the driver asks for one. */
@Injectable()
class HeaderTimeoutInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string> }>();
    const ms = Number(request.headers[OUTER_TIMEOUT_HEADER] ?? 0);
    if (!ms) return next.handle();
    return next.handle().pipe(
      timeout(ms),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

@Controller()
class ProgramController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('programs')
  @Idempotent()
  async run(@Body() program: HandlerProgram, @Headers() headers: Record<string, string>) {
    const run: Run = {
      id: program.id,
      statementTimeoutMs: Number(headers[STATEMENT_TIMEOUT_HEADER] ?? 0),
    };
    await this.ops(program.ops, '', run, this.dataSource.manager, true);
    const last = program.ops.at(-1);
    if (last?.op === 'stream') return streamOf(program.id, last.fail);
    return { id: program.id, ops: program.ops.length };
  }

  private async ops(
    ops: Op[],
    prefix: string,
    run: Run,
    manager: EntityManager,
    top: boolean,
  ): Promise<void> {
    const id = run.id;
    // At the top, the handler's statements go through the DataSource, as a service's do; inside
    // a transaction, through its manager.
    const query = (text: string, values?: unknown[]) =>
      top ? this.dataSource.query(text, values) : manager.query(text, values);
    for (const [index, op] of ops.entries()) {
      const path = `${prefix}${index}`;
      switch (op.op) {
        case 'write':
          await query('INSERT INTO fuzz_effects (program, path) VALUES ($1, $2)', [id, path]);
          break;
        case 'fail':
          try {
            await query(`INSERT INTO fuzz_unique (k) VALUES ('taken')`);
          } catch (error) {
            if (op.then === 'throw' || !expected(error)) throw error;
          }
          break;
        case 'tx':
          try {
            const open = (work: (inner: EntityManager) => Promise<void>) =>
              top
                ? op.isolation
                  ? this.dataSource.transaction(op.isolation, work)
                  : this.dataSource.transaction(work)
                : manager.transaction(work);
            await open(async (inner) => {
              await this.ops(op.body, `${path}.`, run, inner, false);
              if (op.end === 'throw') throw new ProgramError('the nested work failed');
            });
          } catch (error) {
            if (!op.caught || !expected(error)) throw error;
          }
          break;
        case 'sleep':
          await sleep(op.ms);
          break;
        case 'dbsleep':
          // The statement-timeout fault is set where it can bite, and nowhere else: set first
          // thing, it would begin the transaction before an isolation level the program asks.
          if (run.statementTimeoutMs) {
            await query(`SET LOCAL statement_timeout = ${run.statementTimeoutMs}`);
            run.statementTimeoutMs = 0;
          }
          await query('SELECT pg_sleep($1)', [op.ms / 1000]);
          break;
        case 'stream':
          break;
        case 'forget':
          // Started a moment later and never awaited: it lands around the answer's commit.
          setTimeout(() => {
            this.dataSource
              .query('INSERT INTO fuzz_later (program, path) VALUES ($1, $2)', [id, path])
              .catch(() => undefined);
          }, index % 3);
          break;
        case 'http':
          throw new HttpException({ failed: path }, op.status);
      }
    }
  }
}

export async function createFuzzApp(options: {
  databaseUrl: string;
  adapter: AdapterName;
  leaseMs: number;
}): Promise<INestApplication> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: options.databaseUrl,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        connectTimeoutMS: 2000,
        extra: { max: 8, application_name: FUZZ_APPLICATION_NAME },
      }),
      IdempotencyModule.forRoot({
        tenant: () => 1,
        leaseMs: options.leaseMs,
        heartbeat: true,
        databaseTimeoutMs: 3000,
      }),
    ],
    controllers: [ProgramController],
    providers: [{ provide: APP_INTERCEPTOR, useClass: HeaderTimeoutInterceptor }],
  })
  class FuzzAppModule {}
  return bootstrapTestApp(FuzzAppModule, options.adapter);
}
