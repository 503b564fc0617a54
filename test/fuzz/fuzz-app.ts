import { readFileSync } from 'node:fs';
import { type ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
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
import { APP_INTERCEPTOR } from '@nestjs/core';
import {
  Args,
  Context,
  Field,
  GqlExecutionContext,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { GraphQLScalarType } from 'graphql';
import pg, { type Pool } from 'pg';
import { catchError, type Observable, retry, throwError, timeout, TimeoutError } from 'rxjs';
import { type DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  Idempotent,
  IdempotentTransaction,
  PhaseRunner,
} from '../../lib/index.js';
import { type AdapterName, bootstrapTestApp } from '../support/bootstrap.js';
import {
  createDrizzle,
  createKysely,
  createPrisma,
  type Db,
  drizzleDb,
  isProgramError,
  kyselyDb,
  type LayerName,
  pgDb,
  prismaDb,
  ProgramError,
  typeormDb,
} from './data-layers.js';
import { consumerOf, startConsumer } from './fuzz-consumer.js';
import { jobModulesOf, jobProcessorOf } from './fuzz-job.js';
import { type AppChain, type HandlerProgram, type Op } from './handler-program.js';

export const FUZZ_APPLICATION_NAME = 'fuzz-app';
/** The role the `setlocal:role` op switches to: it may use the app's tables, not the library's. */
export const FUZZ_ROLE = 'fuzz_rls';

/**
 * The app's tables: effects without a unique key, so that a write applied twice shows (the id
 * is Prisma's, the backend pid each write ran on is the `read` op's check).
 */
export const FUZZ_DDL = `
  CREATE TABLE IF NOT EXISTS fuzz_effects (
    id bigserial PRIMARY KEY, program text NOT NULL, path text NOT NULL,
    pid integer DEFAULT pg_backend_pid());
  CREATE TABLE IF NOT EXISTS fuzz_later (program text NOT NULL, path text NOT NULL);
  CREATE TABLE IF NOT EXISTS fuzz_outside (program text NOT NULL, path text NOT NULL);
  CREATE TABLE IF NOT EXISTS fuzz_bookings (slot text NOT NULL, program text NOT NULL);
  CREATE TABLE IF NOT EXISTS fuzz_unique (k text PRIMARY KEY);
  INSERT INTO fuzz_unique (k) VALUES ('taken') ON CONFLICT DO NOTHING;
  CREATE TABLE IF NOT EXISTS fuzz_two (n integer PRIMARY KEY);
  INSERT INTO fuzz_two (n) VALUES (1), (2) ON CONFLICT DO NOTHING;
  CREATE OR REPLACE VIEW fuzz_whoami AS SELECT 1 AS id, pg_backend_pid() AS pid;
  DO $$ BEGIN CREATE ROLE ${FUZZ_ROLE} NOLOGIN;
  EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
  GRANT SELECT, INSERT ON fuzz_effects, fuzz_later, fuzz_outside, fuzz_bookings, fuzz_unique,
    fuzz_two, fuzz_whoami TO ${FUZZ_ROLE};
  GRANT USAGE ON SEQUENCE fuzz_effects_id_seq TO ${FUZZ_ROLE};`;

/** Faults the driver asks of one attempt, by header (headers are not fingerprinted). */
export const OUTER_TIMEOUT_HEADER = 'x-fuzz-timeout-ms';
export const STATEMENT_TIMEOUT_HEADER = 'x-fuzz-statement-timeout-ms';
/** The app chain a program runs under (`AppChain`), by header on every attempt of it. */
export const CHAIN_HEADER = 'x-fuzz-chain';
/** The advisory lock every `lock` op takes: programs of one crowd contend for it. */
const LOCK_KEY = 727_027;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

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

/** The SQLSTATE of an error as each layer wraps it (Prisma's P2010 message, Drizzle's cause). */
function sqlState(error: unknown): string | undefined {
  const e = error as {
    code?: unknown;
    driverError?: { code?: unknown };
    cause?: { code?: unknown; originalCode?: unknown };
    meta?: { code?: unknown; driverAdapterError?: { cause?: { originalCode?: unknown } } };
    message?: unknown;
  };
  for (const code of [
    e.meta?.driverAdapterError?.cause?.originalCode,
    e.cause?.originalCode,
    e.driverError?.code,
    e.cause?.code,
    e.code,
  ]) {
    // Prisma's own codes (P2010) are not SQLSTATEs.
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !/^P\d{4}$/.test(code)) {
      return code;
    }
  }
  const match = typeof e.message === 'string' ? /\b(23505|25P02)\b/.exec(e.message) : null;
  return match?.[1];
}

/**
 * What the program's `catch` blocks swallow: the failures it causes itself (a unique violation,
 * the transaction aborted by one, its own thrown error or rollback). A timeout or a lost
 * connection goes through, as in an app that catches what it expects: the model covers such apps.
 */
function expected(error: unknown): boolean {
  if (isProgramError(error)) return true;
  const code = sqlState(error);
  return code === '23505' || code === '25P02';
}

/** One attempt of a program, as the handler runs it. */
interface Run {
  program: HandlerProgram;
  /** The statement-timeout fault, set before the first `pg_sleep` (then 0). */
  statementTimeoutMs: number;
  /** The backends the request's writes ran on, and its reads with whether they must match. */
  writes: number[];
  reads: { pid: number; pinned: boolean }[];
  /** Every statement runs in the request's transaction (a SERIALIZABLE route or database). */
  serializable: boolean;
}

/** The tenant the app's resolver reads: the program's, in the body (a JSON body, or GraphQL's variables). */
export function tenantOf(request: { body?: unknown }): string {
  const body = request.body as { tenant?: unknown; variables?: { program?: unknown } } | undefined;
  if (typeof body?.tenant === 'string') return body.tenant;
  const program = body?.variables?.program;
  if (typeof program === 'string') {
    const tenant = (JSON.parse(program) as HandlerProgram).tenant;
    if (typeof tenant === 'string') return tenant;
  }
  return '1';
}

/** Runs programs on one data layer: the interpreter the controller, the resolver and the consumer share. */
class Interpreter {
  /** The app's `PhaseRunner`, set once the app is up (`phase` ops). */
  phases?: PhaseRunner;

  constructor(
    private readonly root: Db,
    private readonly defaultSerializable: boolean,
  ) {}

  async run(program: HandlerProgram, statementTimeoutMs: number): Promise<void> {
    const run: Run = {
      program,
      statementTimeoutMs,
      writes: [],
      reads: [],
      serializable: Boolean(program.serializable) || this.defaultSerializable,
    };
    await this.ops(program.ops, '', run, this.root);
    // Every statement of the request that must be in its transaction ran on its connection.
    const pids = new Set([...run.writes, ...run.reads.filter((r) => r.pinned).map((r) => r.pid)]);
    if (pids.size > 1) {
      throw new Error(
        `the request's statements ran on ${pids.size} backends: ${[...pids].join(', ')}`,
      );
    }
  }

  private async ops(ops: Op[], prefix: string, run: Run, db: Db): Promise<void> {
    const id = run.program.id;
    for (const [index, op] of ops.entries()) {
      const path = `${prefix}${index}`;
      switch (op.op) {
        case 'write':
          run.writes.push(await db.insertEffect(id, path));
          break;
        case 'read': {
          const pid = await db.whoami();
          run.reads.push({ pid, pinned: run.serializable || run.writes.length > 0 });
          break;
        }
        case 'fail':
          try {
            await db.rows(`INSERT INTO fuzz_unique (k) VALUES ('taken')`);
          } catch (error) {
            if (op.then === 'throw' || !expected(error)) throw error;
          }
          break;
        case 'tx':
          try {
            await db.transaction(
              (inner) => this.ops(op.body, `${path}.`, run, inner),
              op.end,
              op.isolation,
            );
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
            await db.rows(`SET LOCAL statement_timeout = ${run.statementTimeoutMs}`);
            run.statementTimeoutMs = 0;
          }
          // Cast: Prisma's raw queries cannot read a void column.
          await db.rows('SELECT pg_sleep($1)::text AS slept', [op.ms / 1000]);
          break;
        case 'stream':
          break;
        case 'forget':
          // Started a moment later and never awaited: it lands around the answer's commit.
          setTimeout(() => {
            this.root
              .rows('INSERT INTO fuzz_later (program, path) VALUES ($1, $2)', [id, path])
              .catch(() => undefined);
          }, index % 3);
          break;
        case 'http':
          throw new HttpException({ failed: path }, op.status);
        case 'lock':
          await this.book(db, run, op.scope);
          break;
        case 'setlocal':
          if (op.what === 'role') await db.rows(`SET LOCAL ROLE ${FUZZ_ROLE}`);
          else if (op.what === 'config')
            await db.rows(`SELECT set_config('fuzz.tenant', $1, true)`, [id]);
          else await db.rows(`SET LOCAL statement_timeout = '3s'`);
          break;
        case 'outside':
          await IdempotentTransaction.outside(() =>
            this.root.rows('INSERT INTO fuzz_outside (program, path) VALUES ($1, $2)', [id, path]),
          );
          break;
        case 'cursor':
          await db.cursor(async (n) => {
            run.writes.push(await db.insertEffect(id, `${path}.${n - 1}`));
          });
          break;
        case 'batch':
          await db.batch(
            id,
            Array.from({ length: op.n }, (_, i) => `${path}.${i}`),
          );
          break;
        case 'phase': {
          // Its statements run in the phase's own transaction (the scope joins the layer's
          // code to it), on a connection of their own: checked apart from the request's.
          const inPhase: Run = { ...run, writes: [], reads: [], serializable: false };
          try {
            // A work that takes only the manager: on a oneCommit route, it commits with the claim.
            await this.phases!.run(`p${path}`, async () => {
              await this.ops(op.body, `${path}.`, inPhase, this.root);
              if (op.end === 'throw') throw new ProgramError('the phase gave up');
              return {};
            });
          } catch (error) {
            if (!op.caught || !expected(error)) throw error;
          } finally {
            run.statementTimeoutMs = inPhase.statementTimeoutMs;
          }
          const pids = new Set([
            ...inPhase.writes,
            ...inPhase.reads.filter((r) => r.pinned).map((r) => r.pid),
          ]);
          if (pids.size > 1) {
            throw new Error(`phase ${path}'s statements ran on ${pids.size} backends`);
          }
          break;
        }
      }
    }
  }

  /** The mutex recipe: lock, count the slot's bookings, book it if free, unlock. */
  private async book(db: Db, run: Run, scope: 'session' | 'xact'): Promise<void> {
    const slot = run.program.key ?? run.program.id;
    const bookIfFree = async () => {
      const [{ n }] = await db.rows<{ n: number }>(
        'SELECT count(*)::int AS n FROM fuzz_bookings WHERE slot = $1',
        [slot],
      );
      if (n === 0) {
        await db.rows('INSERT INTO fuzz_bookings (slot, program) VALUES ($1, $2)', [
          slot,
          run.program.id,
        ]);
      }
    };
    if (scope === 'xact') {
      await db.rows('SELECT pg_advisory_xact_lock($1)::text AS locked', [LOCK_KEY]);
      return bookIfFree();
    }
    await db.rows('SELECT pg_advisory_lock($1)::text AS locked', [LOCK_KEY]);
    try {
      await bookIfFree();
    } finally {
      await db.rows('SELECT pg_advisory_unlock($1)', [LOCK_KEY]).catch(() => undefined);
    }
  }
}

/** The headers of the request a route or a field runs for. */
function headersOf(context: ExecutionContext): Record<string, string> | undefined {
  const request =
    context.getType<string>() === 'graphql'
      ? GqlExecutionContext.create(context).getContext<{
          req: { headers: Record<string, string> };
        }>().req
      : context.switchToHttp().getRequest<{ headers: Record<string, string> }>();
  return request?.headers;
}

/** The outer timeout a global interceptor applies, when the driver asks for one. */
@Injectable()
class HeaderTimeoutInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const ms = Number(headersOf(context)?.[OUTER_TIMEOUT_HEADER] ?? 0);
    if (!ms) return next.handle();
    return next.handle().pipe(
      timeout(ms),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

/**
 * The response a route or a field answers on (Express' `res`, Fastify's `reply.raw`; a GraphQL
 * field's through its context's request), for an audit that watches once it went out.
 */
function responseOf(context: ExecutionContext): ServerResponse | undefined {
  if (context.getType<string>() === 'graphql') {
    // Apollo on Express: the request's `res`; Mercurius on Fastify: its reply's `raw`.
    const gql = GqlExecutionContext.create(context).getContext<{
      req?: { res?: ServerResponse };
      reply?: { raw?: ServerResponse };
    }>();
    return gql.req?.res ?? gql.reply?.raw;
  }
  const response = context.switchToHttp().getResponse<{ raw?: ServerResponse } & ServerResponse>();
  return response.raw ?? response;
}

/**
 * The app's own chain around every route and field (`AppChain`), inside the outer timeout: as
 * an app registers its retry or audit interceptor, with no knowledge of `@Idempotent()`.
 */
@Injectable()
class AppChainInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const chain = headersOf(context)?.[CHAIN_HEADER] as AppChain | undefined;
    const result$ = next.handle();
    // An audit records what came; what failed is the returned run's to answer.
    const watch = () => void result$.subscribe({ error: () => undefined });
    switch (chain) {
      case 'retry':
        return result$.pipe(retry(1));
      case 'audit':
        watch();
        return result$;
      case 'late-audit': {
        // Once the answer went out (its audit entry written by then): the latest an audit
        // watches, and the hardest, since nobody is left to get what a run does then.
        const response = responseOf(context);
        if (response) response.once('close', watch);
        else setTimeout(watch, 25);
        return result$;
      }
      default:
        return result$;
    }
  }
}

const INTERPRETER = Symbol('INTERPRETER');

function controllerOf(interpreter: Interpreter) {
  @Controller()
  class ProgramController {
    private async answer(program: HandlerProgram, headers: Record<string, string>) {
      await interpreter.run(program, Number(headers[STATEMENT_TIMEOUT_HEADER] ?? 0));
      const last = program.ops.at(-1);
      if (last?.op === 'stream') return streamOf(program.id, last.fail);
      return { id: program.id, ops: program.ops.length };
    }

    @Post('programs')
    @Idempotent()
    run(@Body() program: HandlerProgram, @Headers() headers: Record<string, string>) {
      return this.answer(program, headers);
    }

    @Post('programs-one-commit')
    @Idempotent({ oneCommit: true })
    runOneCommit(@Body() program: HandlerProgram, @Headers() headers: Record<string, string>) {
      return this.answer(program, headers);
    }

    @Post('programs-serializable')
    @Idempotent({ isolationLevel: 'SERIALIZABLE' })
    runSerializable(@Body() program: HandlerProgram, @Headers() headers: Record<string, string>) {
      return this.answer(program, headers);
    }
  }
  return ProgramController;
}

/** A `BigInt` in a GraphQL answer, as a string (stored as the scalar writes it, and replayed). */
const BigIntScalar = new GraphQLScalarType({
  name: 'BigInt',
  serialize: (value) => String(value as bigint),
});

@ObjectType()
class ProgramAnswer {
  @Field()
  id!: string;

  @Field(() => Int)
  ops!: number;

  @Field(() => Date, { nullable: true })
  at?: Date;

  @Field(() => BigIntScalar, { nullable: true })
  big?: bigint;
}

/** The day every `date` answer carries, plus its ops in seconds. */
export const ANSWER_EPOCH = Date.UTC(2024, 0, 1);

function resolverOf(interpreter: Interpreter) {
  @Resolver()
  class ProgramResolver {
    private async answer(source: string, req: { headers: Record<string, string> }) {
      const program = JSON.parse(source) as HandlerProgram;
      await interpreter.run(program, Number(req.headers[STATEMENT_TIMEOUT_HEADER] ?? 0));
      const answer: ProgramAnswer = { id: program.id, ops: program.ops.length };
      if (program.shape === 'date') answer.at = new Date(ANSWER_EPOCH + program.ops.length * 1000);
      if (program.shape === 'bigint') answer.big = BigInt(program.ops.length);
      return answer;
    }

    @Query(() => Int)
    ping() {
      return 0;
    }

    @Mutation(() => ProgramAnswer)
    @Idempotent()
    run(
      @Args('program') program: string,
      @Context('req') req: { headers: Record<string, string> },
    ) {
      return this.answer(program, req);
    }

    @Mutation(() => ProgramAnswer)
    @Idempotent({ isolationLevel: 'SERIALIZABLE' })
    runSerializable(
      @Args('program') program: string,
      @Context('req') req: { headers: Record<string, string> },
    ) {
      return this.answer(program, req);
    }

    /** A field beside the program's that fails: a partial answer, not idempotent. */
    @Mutation(() => Int, { nullable: true })
    broken(): number {
      throw new Error('a field that fails');
    }
  }
  return ProgramResolver;
}

/**
 * Routes over HTTP, mutations on Apollo (`graphql`, on Express) or on Mercurius (`mercurius`,
 * on Fastify: its own executor, error shape and replay hook), messages to a RabbitMQ
 * consumer (`fuzz-consumer.ts`), or BullMQ jobs to an `@IdempotentJob()` processor
 * (`fuzz-job.ts`).
 */
export type TransportName = 'http' | 'graphql' | 'mercurius' | 'rabbitmq' | 'bullmq';
export const TRANSPORTS: TransportName[] = ['http', 'graphql', 'mercurius', 'rabbitmq', 'bullmq'];

/** Whether programs reach the app as GraphQL mutations, on either driver. */
export const isGraphql = (transport: TransportName): boolean =>
  transport === 'graphql' || transport === 'mercurius';

export interface FuzzAppOptions {
  databaseUrl: string;
  adapter: AdapterName;
  layer: LayerName;
  transport: TransportName;
  leaseMs: number;
  /** The database's `default_transaction_isolation` is serializable (set by the runner). */
  defaultSerializable: boolean;
  /** The queue the consumer or processor takes its messages or jobs from (`rabbitmq`, `bullmq`). */
  queue?: string;
  /** The Redis of the BullMQ queue (transport `bullmq`). */
  redisUrl?: string;
  /** On `bullmq`, the processor without `@IdempotentJob()` (the control). */
  plainJobs?: boolean;
}

const idempotencyOptions = (options: FuzzAppOptions) => ({
  tenant: (request: { body?: unknown }) => tenantOf(request),
  leaseMs: options.leaseMs,
  heartbeat: true,
  databaseTimeoutMs: 3000,
});

export async function createFuzzApp(options: FuzzAppOptions): Promise<INestApplication> {
  const graphql =
    options.transport === 'graphql'
      ? [
          GraphQLModule.forRoot<ApolloDriverConfig>({
            driver: ApolloDriver,
            autoSchemaFile: true,
            graphiql: false,
            includeStacktraceInErrorResponses: false,
          }),
        ]
      : options.transport === 'mercurius'
        ? [
            GraphQLModule.forRoot<MercuriusDriverConfig>({
              // Loaded only here: Mercurius' @fastify/static is an ES module that a jest run
              // importing this file for its constants (test/long/fuzz) could not require.
              driver: (await import('@nestjs/mercurius')).MercuriusDriver,
              autoSchemaFile: true,
              graphiql: false,
            }),
          ]
        : [];
  const adapter: AdapterName =
    options.transport === 'graphql'
      ? 'express'
      : options.transport === 'mercurius'
        ? 'fastify'
        : options.adapter;
  // The outer timeout first: it wraps the app's chain, which wraps `@Idempotent()`.
  const interceptors = [
    { provide: APP_INTERCEPTOR, useClass: HeaderTimeoutInterceptor },
    { provide: APP_INTERCEPTOR, useClass: AppChainInterceptor },
  ];

  if (options.layer === 'typeorm') {
    @Injectable()
    class TypeormInterpreter extends Interpreter {
      constructor(@InjectDataSource() dataSource: DataSource) {
        super(typeormDb(dataSource), options.defaultSerializable);
      }
    }
    // The controller and resolver take the interpreter as a provider, built on the DataSource.
    const holder: { interpreter?: Interpreter } = {};
    const lazy = new Proxy({} as Interpreter, {
      get: (_target, name) => {
        const target = holder.interpreter!;
        const value = target[name as keyof Interpreter] as unknown;
        return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
      },
    });
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
        IdempotencyModule.forRoot(idempotencyOptions(options)),
        ...graphql,
        ...jobModules(options),
      ],
      controllers: controllersOf(options, lazy),
      providers: [
        ...interceptors,
        { provide: INTERPRETER, useClass: TypeormInterpreter },
        ...(isGraphql(options.transport) ? [resolverOf(lazy)] : []),
        ...processorsOf(options, lazy),
      ],
    })
    class FuzzAppModule {}
    const app = await bootstrapTestApp(FuzzAppModule, adapter);
    holder.interpreter = app.get<Interpreter>(INTERPRETER);
    holder.interpreter.phases = app.get(PhaseRunner);
    return withConsumer(app, options);
  }

  // A data layer on the library's pool seam: one pg.Pool, the library's and the layer's.
  const pool: Pool = new pg.Pool({
    connectionString: options.databaseUrl,
    max: 4,
    connectionTimeoutMillis: 5000,
    application_name: FUZZ_APPLICATION_NAME,
  });
  pool.on('error', () => undefined);
  await applySchema(pool);
  const root = rootDb(options.layer, pool);
  const interpreter = new Interpreter(root, options.defaultSerializable);
  @Module({
    imports: [
      IdempotencyModule.forRoot({ ...idempotencyOptions(options), pool }),
      ...graphql,
      ...jobModules(options),
    ],
    controllers: controllersOf(options, interpreter),
    providers: [
      ...interceptors,
      ...(isGraphql(options.transport) ? [resolverOf(interpreter)] : []),
      ...processorsOf(options, interpreter),
    ],
  })
  class FuzzPoolAppModule {}
  const app = await bootstrapTestApp(FuzzPoolAppModule, adapter);
  interpreter.phases = app.get(PhaseRunner);
  return withConsumer(app, options);
}

/** The routes over HTTP, or the consumer's handlers (a GraphQL app has its resolver instead). */
function controllersOf(options: FuzzAppOptions, interpreter: Interpreter) {
  if (options.transport === 'http') return [controllerOf(interpreter)];
  if (options.transport === 'rabbitmq') {
    return [consumerOf(interpreter, options.databaseUrl, FUZZ_APPLICATION_NAME)];
  }
  return [];
}

/** BullMQ's modules, on the `bullmq` transport. */
function jobModules(options: FuzzAppOptions) {
  if (options.transport !== 'bullmq') return [];
  if (!options.queue || !options.redisUrl) throw new Error('bullmq needs a queue and a Redis');
  return jobModulesOf(options.queue, options.redisUrl);
}

/** The job processor, on the `bullmq` transport. */
function processorsOf(options: FuzzAppOptions, interpreter: Interpreter) {
  if (options.transport !== 'bullmq') return [];
  return [
    jobProcessorOf(
      interpreter,
      options.databaseUrl,
      FUZZ_APPLICATION_NAME,
      options.queue!,
      options.plainJobs,
    ),
  ];
}

/** The consumer's transport connected and started, on the `rabbitmq` transport. */
async function withConsumer(
  app: INestApplication,
  options: FuzzAppOptions,
): Promise<INestApplication> {
  if (options.transport !== 'rabbitmq') return app;
  if (!options.queue) throw new Error('the rabbitmq transport needs a queue');
  await startConsumer(app, options.queue);
  return app;
}

function rootDb(layer: Exclude<LayerName, 'typeorm'>, pool: Pool): Db {
  switch (layer) {
    case 'pg':
      return pgDb(pool);
    case 'prisma':
      return prismaDb(createPrisma(pool));
    case 'drizzle':
      return drizzleDb(createDrizzle(pool));
    case 'kysely':
      return kyselyDb(createKysely(pool));
  }
}

/** The library's tables from its plain SQL schema, once (the runner's DDL made the app's). */
async function applySchema(pool: Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock(727026)');
    const { rows } = await client.query<{ present: boolean }>(
      "SELECT to_regclass('idempotency_keys') IS NOT NULL AS present",
    );
    if (!rows[0].present) await client.query(readFileSync('migrations/schema.sql', 'utf8'));
  } finally {
    await client.query('SELECT pg_advisory_unlock(727026)').catch(() => undefined);
    client.release();
  }
}
