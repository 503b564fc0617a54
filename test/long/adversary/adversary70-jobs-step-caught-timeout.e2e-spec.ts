/**
 * Adversary 70: a job of BullMQ's step idiom whose step catches its own statement's
 * `statement_timeout` and goes on, then moves itself (`job.moveToDelayed(ts, token)`, `throw
 * new DelayedError()`), is never failed: it goes back to the delayed set about once a second,
 * for ever, no attempt counted, never in the failed set. Adversary 68's break (a caught
 * timeout), through the step's commit instead of the final one.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam whose pool sets
 * `statement_timeout: 500`; step one runs a query that takes a second inside `.catch()`, then
 * moves the job to the delayed set for step two. `attempts: 2` and a backoff.
 *
 * What happens: PostgreSQL cancels the query (57014) and aborts the job's transaction. The
 * move commits the step first (`commitStep`, lib/jobs/idempotent-jobs.service.ts):
 * `commitWith` meets the aborted transaction and throws `TransactionAbortedError(57014)`,
 * which `commitStep` marks THROWN_BY_LIBRARY ("the library's commit, failing in the job's
 * move"). It reaches `run()` as the library's; `afterJobError` classifies it `retry` (503),
 * and the job is delayed, no attempt. Every run meets the same. The final commit reads
 * `transaction.lastError` to tell this case (round 68); the step's commit does not.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "catches a failed statement and goes on |
 * its own error ... attempts as for any error, however passing the statement's failure (a
 * caught statement_timeout)". The step's commit is refused because of the job's own
 * statement, not a database that failed in passing.
 *
 * Controls: the same step without the caught timeout completes (two runs); the caught timeout
 * in a job without steps fails after its attempts (round 68's fix).
 *
 * Severity: medium (a job that can never complete runs for ever, a slow query every second,
 * invisible to the failed set; the step idiom is BullMQ's documented pattern).
 *
 * Fails now: { state: 'delayed' or 'active', attemptsMade: 0, runs: ~7 in 10 s }.
 *
 * Fixed: a step commit that meets a transaction the job's own caught failure aborted is the job's
 * error, not the library's (`commitStep`): an attempt.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { DelayedError, type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;
let runs = 0;

interface Report {
  day: string;
  step?: number;
  catches: boolean;
  steps: boolean;
}

async function startApp(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
  class Reports extends WorkerHost {
    @IdempotentJob()
    async process(job: Job<Report>, token?: string) {
      runs += 1;
      if ((job.data.step ?? 1) === 1) {
        if (job.data.catches) await pool.query('SELECT pg_sleep(1)').catch(() => undefined);
        else await pool.query('SELECT 1');
        if (job.data.steps) {
          await job.updateData({ ...job.data, step: 2 });
          await job.moveToDelayed(Date.now() + 100, token);
          throw new DelayedError();
        }
      }
      return { day: job.data.day };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Reports],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

async function reportJob(queueName: string, data: Omit<Report, 'day'>, ms: number) {
  runs = 0;
  const app = await startApp(queueName);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add(
      'report',
      { day: '2026-12-04', ...data },
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

onRedis('adversary 70: a step that catches its own statement_timeout, then moves', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv70_step_caught');
    pool = new Pool({ connectionString: database.url, max: 4, statement_timeout: 500 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: the step without the caught timeout completes', async () => {
    const result = await reportJob('plain-step', { catches: false, steps: true }, 10_000);
    expect(result).toMatchObject({ outcome: 'completed', state: 'completed', runs: 2 });
  }, 60_000);

  it('control: the caught timeout without a step fails after its attempts', async () => {
    const result = await reportJob('no-step', { catches: true, steps: false }, 10_000);
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);

  it('the caught timeout, then the move: fails after its attempts (not delayed for ever)', async () => {
    const result = await reportJob('caught-step', { catches: true, steps: true }, 10_000);
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);
});
