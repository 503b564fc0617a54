/**
 * Adversary 87: a job's TypeORM `dataSource.query()` left unawaited (fire and forget) is lost:
 * it fails with "TypeError: Cannot read properties of undefined (reading 'query')" and never
 * runs, neither in the job's transaction nor on its own, though the job completed.
 *
 * User code: jobs.md's app shape (BullModule, TypeOrmModule.forRoot, IdempotencyModule.forRoot
 * ({ globalKeys: true })); a `@nestjs/bullmq` processor under `@IdempotentJob()` that inserts a
 * row with `dataSource.query()` awaited, then starts a second `dataSource.query()` (a slow
 * `INSERT ... SELECT ... FROM pg_sleep(0.5)`) without awaiting it, a `.catch()` noting its
 * failure, and returns.
 *
 * Code path: lib/jobs/idempotent-jobs.service.ts (runOnce: the job's transaction scope), the
 * TypeORM seam (lib/transaction/transaction-scope.ts joiningCreateQueryRunner, lib/data-layers/
 * lazy-transaction.ts: `DataSource.query` routed to the job's query runner), the
 * transaction's `afterCodeStatements` wait and lib/claim/lease-renewals.ts `heartbeatStop`
 * ('after-code-statements'): the statement is started on the job's runner, which is gone when
 * TypeORM sends it (its `databaseConnection` undefined): it is never "left running" for the
 * commit to wait for, nor handed a connection of its own.
 *
 * Docs quote (docs/guides/transactions.md, "Database work belongs before the answer"): "A
 * statement of its code still running on the request's connection when the handler answers
 * (one not awaited, ...) runs to its end, and the stored answer and `COMMIT` are sent after it:
 * what it wrote commits with the answer [...] on a route, a GraphQL field, a BullMQ job and a
 * scheduled tick alike"; docs/guides/data-layers.md: "After the answer committed, work the
 * handler left running (a promise it did not await) runs on its own".
 *
 * Severity: high (a job's write silently lost: BullMQ says completed, the kept result replays,
 * the statement never ran; the app sees only its own `.catch()` with a TypeError).
 *
 * Failed before the fix: rows ['a'] (expected ['a', 'b']); the left statement rejects with QueryFailedError
 * "TypeError: Cannot read properties of undefined (reading 'query')".
 *
 * Control: the same processor without `@IdempotentJob()`: rows ['a', 'b'].
 *
 * Fixed (session of 2026-12-06, third): a statement TypeORM's `query()` was asked for while the
 * transaction was open, that reaches its `connect()` only after the end, runs apart once the
 * answer committed (refused after a rollback), as work started after the answer does
 * (lib/data-layers/lazy-transaction.ts, `queryFrom`'s `send`). HTTP routes are guarded by the
 * same change (test/transaction-seam.e2e-spec.ts, "-1: before, not awaited").
 *
 * Suggested fix: as adversary87-tasks-typeorm-unawaited-query-lost: a TypeORM statement started
 * in the job's scope is sent on its runner at once (tracked, COMMIT behind it), or, once that
 * runner is released, on a runner of its own; never on the released runner.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { type DataSource } from 'typeorm';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import {
  redisServerInstalled,
  startTestRedis,
  type TestRedis,
} from '../../support/redis-server.js';

const onRedis = redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;
const failures: string[] = [];

async function work(dataSource: DataSource, job: Job<{ id: string }>) {
  await dataSource.query(`INSERT INTO audit (id, n) VALUES ($1, 'a')`, [job.data.id]);
  // fire and forget: a slow write the job does not wait for
  dataSource
    .query(`INSERT INTO audit (id, n) SELECT $1, 'b' FROM pg_sleep(0.5)`, [job.data.id])
    .catch((error: Error) => failures.push(`${error.name}: ${error.message}`));
  return { done: job.data.id };
}

@Processor('adv87ua-keyed')
class KeyedProcessor extends WorkerHost {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {
    super();
  }

  @IdempotentJob()
  async process(job: Job<{ id: string }>) {
    return work(this.dataSource, job);
  }
}

@Processor('adv87ua-plain')
class PlainProcessor extends WorkerHost {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {
    super();
  }

  async process(job: Job<{ id: string }>) {
    return work(this.dataSource, job);
  }
}

async function run(keyed: boolean, id: string) {
  const name = keyed ? 'adv87ua-keyed' : 'adv87ua-plain';
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url: database.url }),
      IdempotencyModule.forRoot({ globalKeys: true }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name }),
    ],
    providers: [keyed ? KeyedProcessor : PlainProcessor],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
  const queue = new Queue(name, { connection: { port: redis.port } });
  const events = new QueueEvents(name, { connection: { port: redis.port } });
  failures.length = 0;
  try {
    await events.waitUntilReady();
    const added = await queue.add('j', { id }, { attempts: 3 });
    const outcome = await added.waitUntilFinished(events, 15_000).then(
      (value: unknown) => ({ completed: value }),
      (error: Error) => ({ failed: error.message }),
    );
    // Until the left statement wrote its row, or failed, or 10 s passed.
    let rows: string[] = [];
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      const found = await pool.query<{ n: string }>(
        'SELECT n FROM audit WHERE id = $1 ORDER BY n',
        [id],
      );
      rows = found.rows.map((row) => row.n);
      if (rows.includes('b') || failures.length > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return { outcome, rows, failures: [...failures] };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 87: a job leaves a TypeORM query unawaited', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv87_job_unawaited_query');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE audit (id text NOT NULL, n text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the library, the left query runs and writes its row', async () => {
    expect(await run(false, 'p1')).toEqual({
      outcome: { completed: { done: 'p1' } },
      rows: ['a', 'b'],
      failures: [],
    });
  }, 30_000);

  it('with @IdempotentJob(), the left query runs and writes its row', async () => {
    expect(await run(true, 'k1')).toEqual({
      outcome: { completed: { done: 'k1' } },
      rows: ['a', 'b'],
      failures: [],
    });
  }, 30_000);
});
