/**
 * Adversary 69: a job whose own query inside a `PhaseRunner` phase always exceeds the
 * database's `statement_timeout` is never failed: it goes back to the delayed set about once a
 * second, for ever, its attempts never counted, never in the failed set. Adversary 67's break,
 * back through a phase: round 67 made "an error the job's work threw, its own statements'
 * database failures included" an attempt, but a statement of the job's own run in a phase's
 * work (`phases.run(name, work)`) reaches the job wrapped as the library's error.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam whose pool sets
 * `statement_timeout: 500`; the job does its slow report (`pg_sleep(1)`) in a phase of its own,
 * as jobs.md tells a job to put "the writes that must precede a call in a phase of their own
 * (`phases.run()`)". `attempts: 2` and a backoff.
 *
 * What happens: `PhaseRunner.run` runs the work inside `guard()` (lib/phases/
 * phase-runner.service.ts), which turns every error `classifyHandlerError` calls `retry` into
 * the library's own: PostgreSQL's 57014 becomes `TransientDatabaseError`, an
 * `IdempotencyError`. `IdempotentJobs.run` (lib/jobs/idempotent-jobs.service.ts) calls
 * `afterJobError(error, fromWork = true)`; its "the job's own error" branch is skipped for an
 * `IdempotencyError`, so the 503 is `delay`: moved to the delayed set, `DelayedError`, no
 * attempt. The next run meets the same timeout, and so on for ever.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "has a statement of its own fail, however
 * passing (its statement_timeout, ...): its own error, as without the library: an attempt,
 * BullMQ's backoff, and the failed set once its attempts are spent ... (Delayed with no attempt
 * counted, a job whose query always times out would run for ever.) The library's own
 * statements met in its work (a step's commit as it moves, a PhaseRunner phase's commit) are
 * the library's". The query here is the job's, not the phase's commit.
 *
 * Control: the same query outside a phase (round 67's fix): failed after 2 attempts.
 *
 * Severity: medium (a job that can never succeed runs for ever, a slow query every second
 * against the database, invisible to the failed set and its alerts; phases are the guide's
 * own advice for work before a call).
 *
 * Fixed: `PhaseRunner` notes the failures of a phase's own work it hands on in the library's words
 * (lib/phases/phase-work-failure.ts); a job counts them as its own (an attempt).
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob, PhaseRunner } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;
let runs = 0;

async function startApp(queue: string, inPhase: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class Reports extends WorkerHost {
    constructor(private readonly phases: PhaseRunner) {
      super();
    }

    @IdempotentJob()
    async process(job: Job<{ day: string }>) {
      runs += 1;
      if (inPhase) {
        await this.phases.run('report', async () => {
          await pool.query('SELECT pg_sleep(1)');
          return { day: job.data.day };
        });
      } else {
        await pool.query('SELECT pg_sleep(1)');
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

/** Adds the report job; how it stands after `ms`. */
async function reportJob(queueName: string, inPhase: boolean, ms: number) {
  runs = 0;
  const app = await startApp(queueName, inPhase);
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

onRedis('adversary 69: a job whose query in a phase always exceeds statement_timeout', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv69_phase_timeout');
    pool = new Pool({ connectionString: database.url, max: 4, statement_timeout: 500 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: the query outside a phase fails the job after its attempts', async () => {
    const result = await reportJob('outside', false, 10_000);
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
    expect(result.outcome).toMatch(/statement timeout/);
  }, 60_000);

  it('the query in a phase fails the job after its attempts (not delayed for ever)', async () => {
    const result = await reportJob('in-phase', true, 10_000);
    // Fails: { outcome: 'not settled', state: 'delayed' or 'active', attemptsMade: 0,
    // runs: ~6 in 10 s }, and so on for ever.
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);
});
