/**
 * Adversary 74: a step that moves on WITHOUT new data (a poll: "not settled yet, look again in
 * a second") drops the data its key kept of the job's earlier step, so a job that takes the
 * key over after its owner is gone (removed, replaced by its deduplication) finds none and is
 * failed for good with `JobStepOwnerGoneError` ("it saved its next step after it moved"), while
 * the app saved every step before it moved, as jobs.md asks, and the data BullMQ had of the
 * owner was the right data to go on from.
 *
 * The app: a processor keyed by its order (`key`, `fingerprint` the order, as jobs.md says for
 * a step job) on the pool seam, in BullMQ's step idiom. Step `create` inserts the payment's
 * row, saves its next step (`job.updateData({ ...data, step: 'poll' })`, then
 * `job.moveToDelayed(Date.now() + 1000, token)`, `throw new DelayedError()`). Step `poll`
 * reads the settlement (a PSP's webhook writes it); not there yet, it looks again a second
 * later (`moveToDelayed`, `DelayedError`: nothing to save, its data does not change); there, it
 * records the payout and returns. The order is added again (a client's retry) while its first
 * job polls, and the first job is removed (`job.remove()`, as an operator, `clean`, `drain` or
 * a dedup `replace` does): jobs.md says the second job then takes its steps over.
 *
 * Why: lib/jobs/job-steps.ts `stepJob`: a move with nothing held commits its step with
 * `held` undefined, and `RELEASE_JOB_STEP` (lib/claim/postgres-statements.ts) removes the
 * key's `bullmq:step-data` (`phase_results - $7`) for a step without data, though nothing
 * changed since the step that left it. `runOnce` (lib/jobs/idempotent-jobs.service.ts) then
 * finds the owner gone (`stepOwnerSeen`) and no `bullmq:step-data`: `JobStepOwnerGoneError`.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "where BullMQ no longer has the job
 * (removed, drained, or replaced by its deduplication between its steps), the other job takes
 * its steps over and goes on from the step its key reached, with the data that step left
 * (saved before it moved: `updateData`, then the move)" — the app saved its step before it
 * moved; the key reached `poll`; "fails for good" is said only "where the key keeps none".
 *
 * Control: the first job removed while it waits after `create` (before any poll): the second
 * job takes over, polls, and completes; `create` once.
 *
 * Severity: medium (the second job failed for good, its order never paid, though the app
 * followed the rule the failure reason gives; a poll loop is BullMQ's most ordinary step).
 *
 * Fails now: the second job { state: 'failed', reason: '... is gone from its queue ... its key
 * keeps no data of its last step to go on from (it saved its next step after it moved) ...' };
 * control passes.
 *
 * Suggested fix: a step that holds no new data keeps the key's step data (or keeps the data
 * BullMQ has now, `job.data`, as the step's): only a step with data replaces it.
 *
 * Fixed: a step that holds no new data keeps the key's step data of the step before it
 * (`RELEASE_JOB_STEP` v4, lib/claim/postgres-statements.ts; `keptStepData` leaves `{ added }`);
 * data written after the move instead forgets it (`stepJob`'s `dataAfterStep`,
 * `IdempotentJobs.forgetStepData`, `FORGET_JOB_STEP_DATA`); `keepsStepData` (job-steps.ts).
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

interface Order {
  orderId: string;
  step?: 'create' | 'poll';
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function startApp(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
  class Payments extends WorkerHost {
    @IdempotentJob({
      key: (job) => (job.data as Order).orderId,
      fingerprint: (job) => ({ orderId: (job.data as Order).orderId }),
    })
    async process(job: Job<Order>, token?: string) {
      const { orderId } = job.data;
      if ((job.data.step ?? 'create') === 'create') {
        await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [orderId, 'create']);
        await job.updateData({ ...job.data, step: 'poll' });
        await job.moveToDelayed(Date.now() + 1000, token);
        throw new DelayedError();
      }
      const { rows } = await pool.query('SELECT 1 FROM settlements WHERE order_id = $1', [orderId]);
      if (rows.length === 0) {
        // Not settled yet: look again in a second (nothing new to save).
        await job.moveToDelayed(Date.now() + 1000, token);
        throw new DelayedError();
      }
      await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [orderId, 'paid']);
      return { paid: orderId };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Payments],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

async function stepRows(orderId: string) {
  const { rows } = await pool.query<{ step: string }>(
    'SELECT step FROM steps WHERE order_id = $1 ORDER BY id',
    [orderId],
  );
  return rows.map((row) => row.step);
}

/** The first job removed once it has polled `polls` times (0: while it waits after create). */
async function orderRetried(queueName: string, orderId: string, polls: number) {
  const app = await startApp(queueName);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const first = await queue.add('payment', { orderId });
    const delayed = async (job: Job) => {
      for (let i = 0; i < 50 && (await job.getState()) !== 'delayed'; i++) await sleep(50);
    };
    await delayed(first);
    // Each poll is a run of its own; wait until the first job has polled as asked.
    for (let run = 0; run < polls; run++) {
      const started = (await queue.getJob(first.id!))!.attemptsStarted;
      for (let i = 0; i < 100; i++) {
        const now = (await queue.getJob(first.id!))!;
        if (now.attemptsStarted > started && (await now.getState()) === 'delayed') break;
        await sleep(50);
      }
    }
    const retry = await queue.add('payment', { orderId });
    await delayed(retry);
    await first.remove();
    // The PSP settles the payment.
    await pool.query('INSERT INTO settlements (order_id) VALUES ($1)', [orderId]);
    const settled = await retry.waitUntilFinished(events, 30_000).then(
      (value: unknown) => ({ state: 'completed', value }),
      (error: Error) => ({ state: 'failed', reason: error.message }),
    );
    return { settled, steps: await stepRows(orderId) };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 74: a poll step drops the step data a take-over goes on from', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv74_poll_step');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      `CREATE TABLE steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL);
       CREATE TABLE settlements (order_id text PRIMARY KEY)`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: owner removed after create: the other job takes over, polls, pays', async () => {
    const result = await orderRetried('poll-control', 'o-1', 0);
    expect(result.settled).toEqual({ state: 'completed', value: { paid: 'o-1' } });
    expect(result.steps).toEqual(['create', 'paid']);
  }, 60_000);

  it('owner removed after a poll: the other job takes over from poll and pays', async () => {
    const result = await orderRetried('poll-after', 'o-2', 1);
    expect(result.settled).toEqual({ state: 'completed', value: { paid: 'o-2' } });
    expect(result.steps).toEqual(['create', 'paid']);
  }, 60_000);
});
