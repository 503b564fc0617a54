/**
 * Adversary 67: a job whose own query always exceeds the database's `statement_timeout` (a
 * report grown too slow for the timeout the app set) is never failed: it goes back to the
 * delayed set about once a second, for ever, its attempts never counted, its backoff never
 * applied, never in the failed set, nothing said above a debug line. Without the library it
 * fails after its attempts, with PostgreSQL's words, where the app's failed-job alert sees it.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam whose pool sets
 * `statement_timeout: 500` (a common guard, also set by a role or a pooler); the job runs a
 * query that takes a second (`pg_sleep(1)`, standing for a report over a grown table). The
 * job has `attempts: 2` and a backoff.
 *
 * What happens: PostgreSQL cancels the query (57014). `afterJobError`
 * (lib/jobs/job-failure.ts) classifies it by `classifyHandlerError` (lib/transaction/
 * failure.ts): 57014 is one of `TRANSIENT_STATES` (lib/connection/connection-errors.ts), so
 * `TransientDatabaseError`, a 503: `delay`. `IdempotentJobs.run` moves the job to the delayed
 * set (`Retry-After`: 1 s) and throws `DelayedError`: no attempt counted. The next run meets
 * the same timeout, and so on: the job never reaches its attempts, runs its one-second query
 * every ~1.5 s for ever, and nothing but a debug log says why.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "throws | its own error, as without the
 * library (attempts, backoff, the failed set)"; the table's "meets a database that fails in
 * passing (unreachable, a deadlock, a timeout)" is for a failure that passes, and the brief's
 * "BullMQ's own semantics (attempts, backoff, failed set) kept or refused with clear words": a
 * job whose every run fails the same way ends in the failed set, or is at least bounded and
 * said.
 *
 * Control: the same processor without the library: failed after 2 attempts, "canceling
 * statement due to statement timeout".
 *
 * Severity: medium (a job that can never succeed runs for ever, a slow query every second
 * against the database, invisible to the failed set and its alerts).
 *
 * Fixed: an error the job's work threw, a database failure of its own statements included, is its
 * own (`afterJobError(error, fromWork)` in lib/jobs/job-failure.ts): an attempt, BullMQ's backoff
 * and failed set; the library's claim and commit still delay without an attempt.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;
let runs = 0;

async function report(job: Job<{ day: string }>) {
  runs += 1;
  await pool.query('SELECT pg_sleep(1)');
  return { day: job.data.day };
}

async function startApp(queue: string, idempotent: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class Plain extends WorkerHost {
    process(job: Job<{ day: string }>) {
      return report(job);
    }
  }
  @Processor(queue)
  class Decorated extends WorkerHost {
    @IdempotentJob()
    process(job: Job<{ day: string }>) {
      return report(job);
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [idempotent ? Decorated : Plain],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

/** Adds the report job; how it stands after `ms`. */
async function reportJob(queueName: string, idempotent: boolean, ms: number) {
  runs = 0;
  const app = await startApp(queueName, idempotent);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add(
      'report',
      { day: '2026-12-04' },
      { attempts: 2, backoff: { type: 'fixed', delay: 200 } },
    );
    const outcome = await job.waitUntilFinished(events, ms).then(
      () => 'completed',
      (error: Error) => (/timed out/i.test(error.message) ? 'not settled' : error.message),
    );
    const settled = (await queue.getJob(job.id!))!;
    return {
      outcome,
      state: await settled.getState(),
      attemptsMade: settled.attemptsMade,
      runs,
    };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 67: a job whose query always exceeds statement_timeout', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv67_timeout');
    pool = new Pool({ connectionString: database.url, max: 4, statement_timeout: 500 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the library, it fails after its attempts, saying why', async () => {
    const result = await reportJob('plain', false, 10_000);
    expect(result).toEqual({
      outcome: 'canceling statement due to statement timeout',
      state: 'failed',
      attemptsMade: 2,
      runs: 2,
    });
  }, 60_000);

  it('with it, the job fails after its attempts (not delayed for ever)', async () => {
    const result = await reportJob('decorated', true, 10_000);
    // Fails: { outcome: 'not settled', state: 'delayed' or 'active', attemptsMade: 0,
    // runs: ~6 in 10 s }, and so on for ever.
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);
});
