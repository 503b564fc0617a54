/**
 * Adversary 78: a job of a queue whose tenant (`bullmq:<queue>`, or `bullmq:<prefix>:<queue>`)
 * is over 255 characters is never run and never fails: the library's claim is refused by the
 * keys table's CHECK on the tenant's length, which it takes for a database failing in passing,
 * and moves the job to the delayed set, no attempt counted, about once a second, for ever.
 *
 * The user code: the docs' processor (`@Processor(name)`, `WorkerHost`, `@IdempotentJob()`)
 * on a queue with a long name (here 250 characters; the same with a long BullMQ `prefix` of
 * the queue's own, `bullmq:<prefix>:<queue>`, e.g. names built from a service, a tenant's id
 * and a purpose). BullMQ accepts the name; the job's attempts: 2.
 *
 * Why it breaks: lib/jobs/job-key.ts `jobTenant` builds the tenant with no check of its length
 * (tasks have one at start-up: `IdempotentTaskNameTooLongError`, "a name over 246
 * characters"), and the claim's INSERT (idempotency_claim_v5) violates
 * `idempotency_keys_tenant_id_length` (CHECK length 1..255, migrations/schema.sql). The store
 * error is logged ("idempotency store call idempotency_claim_v5 failed: ... violates check
 * constraint") and lib/jobs/idempotent-jobs.service.ts treats it as the database failing in
 * passing: `RetryLaterError`, the job moved to the delayed set with no attempt counted. The
 * next run meets the same CHECK. BullMQ's attempts never run out (attemptsMade stays 0), the
 * job is never failed, nothing tells the app why but an ERROR line a second.
 *
 * The docs it contradicts: the promise that a permanent error is not answered "retry later"
 * and nothing hangs; docs/guides/jobs.md: "a key that cannot be kept ... failed at once
 * (`UnrecoverableError`), its reason the library's words"; "(Delayed with no attempt counted,
 * a job whose query always times out would run for ever.)"; docs/guides/schedule.md refuses the
 * same over-long name for a task at start-up, saying so.
 *
 * Severity: low (queue names that long are rare), but the job loops for ever, silently to
 * BullMQ's board (delayed, 0 attempts), and every job of the queue with it.
 *
 * Fails now: after 8 s the job is still `delayed`, attemptsMade 0, attemptsStarted about 8 and
 * growing, no failedReason.
 *
 * Control: a queue name of 240 characters (its tenant 247): the job completes.
 *
 * Suggested fix: check the tenant's length where the processor is bound (its `@Processor`
 * queue name and prefix; refuse at start-up, as for tasks), and in `jobKeyOf`/the job's run: a
 * tenant over 255 characters fails the job at once (`UnrecoverableError`) saying so; or keep an
 * over-long queue's tenant as a digest.
 *
 * Fixed: a job's run checks its queue's tenant before the claim (lib/jobs/job-key.ts
 * `tenantFits`, a pure decision) and fails the job for good (`UnrecoverableError`) with
 * lib/jobs/job-errors.ts `JobQueueTenantTooLongError`, which names the tenant's length, the
 * limit and what to shorten (lib/jobs/idempotent-jobs.service.ts `runOnce`). Not refused at
 * start-up: a processor's queue and prefix are BullMQ's to resolve, per job.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

async function startApp(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
  class Payouts extends WorkerHost {
    @IdempotentJob()
    async process(job: Job<{ orderId: string }>) {
      await pool.query('INSERT INTO payouts (order_id) VALUES ($1)', [job.data.orderId]);
      return { paid: job.data.orderId };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Payouts],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

/** The job after `ms`: its state, attempts and reason. */
async function jobAfter(queueName: string, ms: number) {
  const app = await startApp(queueName);
  const queue = new Queue(queueName, { connection: { host: '127.0.0.1', port: redis.port } });
  try {
    const added = await queue.add('payout', { orderId: queueName.slice(0, 8) }, { attempts: 2 });
    const until = Date.now() + ms;
    let state = await added.getState();
    while (Date.now() < until && state !== 'completed' && state !== 'failed') {
      await new Promise((resolve) => setTimeout(resolve, 200));
      state = await added.getState();
    }
    const job = (await queue.getJob(added.id!))!;
    return {
      state,
      attemptsMade: job.attemptsMade,
      attemptsStarted: job.attemptsStarted,
      failedReason: job.failedReason,
    };
  } finally {
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 78: a queue whose tenant is over 255 characters', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv78_long_queue');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE payouts (id serial PRIMARY KEY, order_id text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: a queue name of 240 characters; the job completes', async () => {
    const job = await jobAfter('c'.repeat(240), 8_000);
    expect(job.state).toBe('completed');
  }, 60_000);

  // Fixed (round 78 fixer)
  it('a queue name of 250 characters: the job fails for good, saying why', async () => {
    const job = await jobAfter('q'.repeat(250), 8_000);
    // Fails: { state: 'delayed', attemptsMade: 0, attemptsStarted: ~8, failedReason: undefined }:
    // the claim's CHECK violation is taken for a passing failure, delayed for ever.
    expect(job.state).toBe('failed');
    expect(job.failedReason).toMatch(/255|tenant|queue/);
  }, 60_000);
});
