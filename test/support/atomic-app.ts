import {
  Body,
  Controller,
  type DynamicModule,
  Injectable,
  type INestApplication,
  Module,
  Post,
  type Type,
  UseInterceptors,
} from '@nestjs/common';
import { InjectDataSource, InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { Column, type DataSource, Entity, PrimaryGeneratedColumn, type Repository } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  type IdempotencyModuleBaseOptions,
  Idempotent,
  IdempotentTransaction,
  PhaseRunner,
  RetryLaterError,
} from '../../lib/index.js';
import { RequestTimeoutInterceptor } from '../../sample-app/request-timeout.interceptor.js';
import { type AdapterName, bootstrapTestApp } from './bootstrap.js';
import { appDatabaseUrl, poolerOption } from './pgbouncer.js';

/** One row per write a handler made, tagged with the way it reached the database. */
@Entity({ name: 'ledger', synchronize: false })
export class LedgerEntry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;

  @Column({ type: 'text' })
  via!: string;
}

export const LEDGER_DDL = `
  CREATE TABLE IF NOT EXISTS ledger (id serial PRIMARY KEY, tag text NOT NULL, via text NOT NULL);
  CREATE TABLE IF NOT EXISTS accounts (id int PRIMARY KEY, balance int NOT NULL DEFAULT 0);
  INSERT INTO accounts (id) VALUES (1), (2) ON CONFLICT DO NOTHING;
  CREATE UNIQUE INDEX IF NOT EXISTS ledger_unique_tag ON ledger (tag) WHERE via = 'unique';`;

/** Every way a Nest service commonly reaches the database. */
export const WAYS = ['repository', 'query', 'transaction', 'explicit'] as const;
export type Way = (typeof WAYS)[number];

export interface LedgerBody {
  tag: string;
  ways?: Way[];
  /** Wait this long after the writes, before answering. */
  delayMs?: number;
  /** Wait on this URL (a slow external system) before the first write. */
  callFirst?: string;
  /** Read through a repository before `callFirst`. */
  readFirst?: boolean;
  /** Read with a row lock (`pessimistic_write`) before the writes. */
  lockRead?: boolean;
  /** Leave a write running that lands 100 ms after the answer (`outside`: out of the request). */
  later?: 'inside' | 'outside';
  /** Throw after the writes, on the first attempt of this tag only. */
  failFirst?: 'retry-later' | 'statement-timeout' | 'lock-timeout';
  /** Lock the accounts in this order, pausing between the two (a deadlock when crossed). */
  lockOrder?: [number, number];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class LedgerService {
  constructor(
    @InjectRepository(LedgerEntry) private readonly entries: Repository<LedgerEntry>,
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly explicit: IdempotentTransaction,
  ) {}

  async write(tag: string, way: Way): Promise<void> {
    switch (way) {
      case 'repository':
        await this.entries.insert({ tag, via: way });
        return;
      case 'query':
        await this.dataSource.query('INSERT INTO ledger (tag, via) VALUES ($1, $2)', [tag, way]);
        return;
      case 'transaction':
        await this.dataSource.transaction((manager) =>
          manager.insert(LedgerEntry, { tag, via: way }),
        );
        return;
      case 'explicit':
        await this.explicit.getRepository(LedgerEntry).save({ tag, via: way });
        return;
    }
  }

  readLocked(): Promise<LedgerEntry | null> {
    return this.entries.findOne({ where: { tag: '-' }, lock: { mode: 'pessimistic_write' } });
  }

  readSomething(): Promise<LedgerEntry | null> {
    return this.entries.findOneBy({ tag: '-' });
  }
}

/** Like a timeout interceptor an app applies to every route (the sample app's), outside ours. */
const outerTimeout = () => new RequestTimeoutInterceptor(200);

/** Tags that already failed once (the failFirst routes succeed on their retry). */
export const failedOnce = new Set<string>();
/** What became of each write a handler left running after its answer. */
export const laterOutcomes = new Map<string, string>();

@Controller()
class LedgerController {
  constructor(
    private readonly ledger: LedgerService,
    private readonly phases: PhaseRunner,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  @Post('ledger')
  @Idempotent()
  async write(@Body() body: LedgerBody) {
    if (body.readFirst) await this.ledger.readSomething();
    if (body.callFirst) await (await fetch(body.callFirst)).text();
    if (body.lockOrder) await this.lockAccounts(body.lockOrder);
    if (body.lockRead) await this.ledger.readLocked();
    for (const way of body.ways ?? ['repository']) await this.ledger.write(body.tag, way);
    if (body.later) this.writeLater(`${body.tag}-later`, body.later);
    if (body.delayMs) await sleep(body.delayMs);
    if (body.failFirst && !failedOnce.has(body.tag)) {
      failedOnce.add(body.tag);
      await this.failAs(body.failFirst);
    }
    const rows = (await this.dataSource.query(
      'SELECT count(*)::int AS n FROM ledger WHERE tag = $1',
      [body.tag],
    )) as { n: number }[];
    return { tag: body.tag, seen: rows[0].n };
  }

  /** Catches a failed statement and answers as if nothing happened: the transaction is aborted. */
  @Post('swallow')
  @Idempotent()
  async swallow(@Body() body: { tag: string }) {
    await this.ledger.write(body.tag, 'repository');
    for (let i = 0; i < 2; i++) {
      try {
        await this.dataSource.query(`INSERT INTO ledger (tag, via) VALUES ($1, 'unique')`, [
          body.tag,
        ]);
      } catch {
        // "already there": the handler goes on
      }
    }
    return { tag: body.tag };
  }

  @Post('phased')
  @Idempotent()
  async phased(
    @Body()
    body: {
      tag: string;
      failFirst?: boolean;
      finishDelayMs?: number;
      phaseDelayMs?: number;
    },
  ) {
    await this.phases.run('one', async (manager) => {
      await manager.insert(LedgerEntry, { tag: body.tag, via: 'phase-one' });
      // Idle in its transaction meanwhile (a statement running would outlive a killed
      // process until it ends: PostgreSQL notices a closed socket when it next reads it).
      if (body.phaseDelayMs) await new Promise((resolve) => setTimeout(resolve, body.phaseDelayMs));
      if (body.failFirst && !failedOnce.has(body.tag)) {
        failedOnce.add(body.tag);
        await this.failAs('statement-timeout');
      }
      return {};
    });
    return this.phases.finish(async (manager) => {
      await manager.insert(LedgerEntry, { tag: body.tag, via: 'finish' });
      if (body.finishDelayMs)
        await manager.query('SELECT pg_sleep($1)', [body.finishDelayMs / 1000]);
      return { tag: body.tag };
    });
  }

  /** finish() under an outer timeout that fires while its work runs. */
  @Post('phased-timeout')
  @Idempotent()
  @UseInterceptors(outerTimeout())
  phasedUnderTimeout(@Body() body: { tag: string; finishDelayMs?: number }) {
    return this.phased(body);
  }

  /** Writes, then a phase: refused, the phase would run while the request's transaction waits. */
  @Post('phase-after-write')
  @Idempotent()
  async phaseAfterWrite(@Body() body: { tag: string }) {
    await this.ledger.write(body.tag, 'repository');
    await this.phases.run('late', () => Promise.resolve({}));
    return { tag: body.tag };
  }

  /** Not awaited: it outlives the request. What became of it is kept for the test. */
  private writeLater(tagged: string, where: 'inside' | 'outside') {
    const schedule = () =>
      setTimeout(() => {
        this.ledger.write(tagged, 'repository').then(
          () => laterOutcomes.set(tagged, 'written'),
          (error: unknown) => laterOutcomes.set(tagged, (error as Error).name),
        );
      }, 100);
    if (where === 'outside') IdempotentTransaction.outside(schedule);
    else schedule();
  }

  private async lockAccounts([first, second]: [number, number]) {
    await this.dataSource.query('UPDATE accounts SET balance = balance + 1 WHERE id = $1', [first]);
    await sleep(300);
    await this.dataSource.query('UPDATE accounts SET balance = balance + 1 WHERE id = $1', [
      second,
    ]);
  }

  private async failAs(kind: NonNullable<LedgerBody['failFirst']>): Promise<void> {
    switch (kind) {
      case 'retry-later':
        throw new RetryLaterError('the downstream system is down', 2);
      case 'statement-timeout':
        await this.dataSource.query('SET LOCAL statement_timeout = 50');
        await this.dataSource.query('SELECT pg_sleep(2)');
        return;
      case 'lock-timeout':
        await this.dataSource.query('SET LOCAL lock_timeout = 50');
        await this.dataSource.query('SELECT * FROM accounts WHERE id = 2 FOR UPDATE');
        return;
    }
  }
}

/** The app of the atomic-by-default tests, on a real DataSource and the real migrations. */
export async function createAtomicApp(options: {
  databaseUrl: string;
  adapter: AdapterName;
  idempotency?: IdempotencyModuleBaseOptions;
  poolSize?: number;
  /** More of the app: modules, controllers and providers a test adds (nestjs-cls, say). */
  extra?: { imports?: DynamicModule[]; controllers?: Type[]; providers?: Type[] };
}): Promise<INestApplication> {
  const url = await appDatabaseUrl(options.databaseUrl);
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url,
        entities: [LedgerEntry],
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        connectTimeoutMS: 2000,
        extra: { max: options.poolSize ?? 10 },
      }),
      TypeOrmModule.forFeature([LedgerEntry]),
      IdempotencyModule.forRoot({
        tenant: () => 1,
        ...poolerOption(),
        ...options.idempotency,
      }),
      ...(options.extra?.imports ?? []),
    ],
    controllers: [LedgerController, ...(options.extra?.controllers ?? [])],
    providers: [LedgerService, ...(options.extra?.providers ?? [])],
  })
  class AtomicAppModule {}
  return bootstrapTestApp(AtomicAppModule, options.adapter);
}
