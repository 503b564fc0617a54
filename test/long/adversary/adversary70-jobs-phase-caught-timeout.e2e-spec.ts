/**
 * Adversary 70: a job whose `PhaseRunner` phase catches its own statement's `statement_timeout`
 * and goes on (a best-effort read in the phase: "try the slow enrichment, else carry on") is
 * never failed: it goes back to the delayed set about once a second, for ever, no attempt
 * counted, never in the failed set. Adversary 68's break (a caught timeout), through a phase;
 * adversary 69's break (a phase's own timeout), through the phase's own `try/catch`. The same
 * with `phases.call()`'s `record` catching its own timeout.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam whose pool sets
 * `statement_timeout: 500`; the phase (`phases.run()`, or `phases.call()`'s record) runs a
 * query that takes a second inside `.catch()` and returns. `attempts: 2` and a backoff.
 *
 * What happens: PostgreSQL cancels the query (57014) and aborts the PHASE's transaction; the
 * phase's work returns normally, so `byWork` marks nothing. `commitPhase`
 * (lib/claim/postgres-claim.store.ts) meets the aborted transaction at its fenced ADVANCE:
 * `TransactionAbortedError(57014)`. `PhaseRunner.guard` classifies it `retry` and throws the
 * library's `TransientDatabaseError` (503), not noted as the work's (`notePhaseWorkFailure`
 * runs only for what `workThrew` holds). `IdempotentJobs.run` reads it as "a phase's commit,
 * the library's": `afterJobError` delays it, no attempt. Every run meets the same.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "catches a failed statement and goes on |
 * its own error ... attempts as for any error, however passing the statement's failure (a
 * caught statement_timeout)". Round 68 fixed it for the job's own transaction
 * (`transaction.lastError` at the final commit); the phase's transaction has the same
 * `lastError`, unread.
 *
 * Control: the same caught query outside a phase (round 68's fix): failed after 2 attempts.
 *
 * Severity: medium (a job that can never complete runs for ever, a slow query every second,
 * invisible to the failed set and its alerts; phases are the guide's advice for work before a
 * call).
 *
 * Fails now: { state: 'delayed' or 'active', attemptsMade: 0, runs: 6-7 in 10 s }, for
 * phases.run(), phases.call()'s record and phases.run() under oneCommit; the control passes.
 * Held: the same caught timeout in phases.finish() (the job's transaction, lastError read).
 *
 * Fixed: a phase commit that meets a transaction its work's own caught failure aborted
 * (`TransactionAbortedError`) is noted as the work's failure (`PhaseRunner.guard`): an attempt.
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

type Where = 'outside' | 'run' | 'call-record' | 'one-commit';

const slowEnrichment = () => pool.query('SELECT pg_sleep(1)').catch(() => undefined);

async function startApp(queue: string, where: Where): Promise<INestApplicationContext> {
  @Processor(queue)
  class Reports extends WorkerHost {
    constructor(private readonly phases: PhaseRunner) {
      super();
    }

    @IdempotentJob(where === 'one-commit' ? { oneCommit: true } : {})
    async process(job: Job<{ day: string }>) {
      runs += 1;
      if (where === 'run' || where === 'one-commit') {
        await this.phases.run('report', async () => {
          await slowEnrichment();
          return { day: job.data.day };
        });
      } else if (where === 'call-record') {
        await this.phases.call(
          'psp',
          async () => ({ id: 'psp-1' }),
          async (_manager, result) => {
            await slowEnrichment();
            return result;
          },
        );
      } else {
        await slowEnrichment();
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

async function reportJob(queueName: string, where: Where, ms: number) {
  runs = 0;
  const app = await startApp(queueName, where);
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

onRedis('adversary 70: a phase that catches its own statement_timeout and goes on', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv70_phase_caught');
    pool = new Pool({ connectionString: database.url, max: 4, statement_timeout: 500 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: caught outside a phase, the job fails after its attempts', async () => {
    const result = await reportJob('outside', 'outside', 10_000);
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);

  it('caught in phases.run(): fails after its attempts (not delayed for ever)', async () => {
    const result = await reportJob('in-run', 'run', 10_000);
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);

  it("caught in phases.call()'s record: fails after its attempts", async () => {
    const result = await reportJob('in-record', 'call-record', 10_000);
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);

  it('caught in phases.run() under oneCommit (the claim commits with the phase): fails after its attempts', async () => {
    const result = await reportJob('in-one-commit', 'one-commit', 10_000);
    expect(result).toMatchObject({ state: 'failed', attemptsMade: 2, runs: 2 });
  }, 60_000);
});
