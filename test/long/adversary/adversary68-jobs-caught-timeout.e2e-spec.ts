/**
 * Adversary 68: a job that catches its own statement's `statement_timeout` and goes on (a
 * best-effort step: "try the slow enrichment, else carry on") is never failed: it goes back to
 * the delayed set about once a second, for ever, no attempt counted, never in the failed set.
 * Adversary 67's break, through the door the job's own `try/catch` opens.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam whose pool sets
 * `statement_timeout: 500`; the job runs a query that takes a second inside `try { } catch { }`
 * and returns. The job has `attempts: 2` and a backoff.
 *
 * What happens: PostgreSQL cancels the query (57014) and aborts the job's transaction; the job
 * returns; `commitAnswer` meets the aborted transaction at COMMIT (`TransactionAbortedError`
 * whose cause is the 57014), `classifyCommitError` makes it `TransientDatabaseError` (503),
 * and `runStepped` (lib/jobs/idempotent-jobs.service.ts) turns every 409/503 answer into
 * `RetryLaterError`, which is not in `THROWN_BY_WORK`: `afterJobError(error, false)` delays
 * it, no attempt. The next run meets the same timeout, and so on, for ever.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "catches a failed statement and goes on |
 * its own error ('nothing of it committed', the statement's words): PostgreSQL aborted its
 * transaction; attempts as for any error"; and "has a statement of its own fail, however
 * passing (its statement_timeout, ...) | its own error ... an attempt ... (Delayed with no
 * attempt counted, a job whose query always times out would run for ever)". The statement
 * is the job's own, not the library's claim or commit: an attempt, then the failed set.
 *
 * Control: the same job letting the error go (not caught): failed after its 2 attempts (the
 * round-67 fix). And without the library, the job that catches completes (nothing of
 * its is in a transaction).
 *
 * Severity: medium (a job that can never complete runs for ever, a slow query every second,
 * invisible to the failed set and its alerts).
 *
 * Fixed: a commit refused because a statement of the job's own failed and it went on
 * (`transaction.lastError`) is the job's error however passing: an attempt (runStepped).
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

async function report(job: Job<{ day: string; catches: boolean }>) {
  runs += 1;
  if (job.data.catches) {
    try {
      await pool.query('SELECT pg_sleep(1)');
    } catch {
      // best effort: the enrichment is optional
    }
  } else {
    await pool.query('SELECT pg_sleep(1)');
  }
  return { day: job.data.day };
}

async function startApp(queue: string, idempotent: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class Plain extends WorkerHost {
    process(job: Job<{ day: string; catches: boolean }>) {
      return report(job);
    }
  }
  @Processor(queue)
  class Decorated extends WorkerHost {
    @IdempotentJob()
    process(job: Job<{ day: string; catches: boolean }>) {
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

async function reportJob(queueName: string, idempotent: boolean, catches: boolean, ms: number) {
  runs = 0;
  const app = await startApp(queueName, idempotent);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add(
      'report',
      { day: '2026-12-04', catches },
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

onRedis('adversary 68: a job that catches its own statement_timeout and goes on', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv68_caught');
    pool = new Pool({ connectionString: database.url, max: 4, statement_timeout: 500 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the library, the job that catches completes', async () => {
    const result = await reportJob('plain', false, true, 10_000);
    expect(result).toEqual({ outcome: 'completed', state: 'completed', attemptsMade: 1, runs: 1 });
  }, 60_000);

  it('control: with it, the job that lets the timeout go fails after its attempts', async () => {
    const result = await reportJob('thrown', true, false, 10_000);
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);

  it('with it, the job that catches the timeout fails after its attempts (not delayed for ever)', async () => {
    const result = await reportJob('caught', true, true, 10_000);
    // Fails: { outcome: 'not settled', state: 'delayed' or 'active', attemptsMade: 0,
    // runs: ~6 in 10 s }, and so on for ever.
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);
});
