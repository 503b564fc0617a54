/**
 * Adversary 75: a job of the app's own id whose steps so far were polls (it moved itself on
 * without saving anything: "not yet, look again"), removed between them and added again under
 * its id, fails for good with `JobStepOwnerGoneError`, and stays failed on every retry: the
 * payment it waits for is never recorded. Nothing of the job was skipped or done: its key
 * reached no step beyond the job's first data, which the job added again has.
 *
 * The app: a processor keyed by its job id (the default; `jobId: 'pay-<order>'`), on the pool
 * seam, BullMQ's step idiom for a wait (https://docs.bullmq.io/patterns/process-step-jobs):
 *
 *   const { rows } = await pool.query('SELECT 1 FROM settlements WHERE order_id = $1', [id]);
 *   if (rows.length === 0) {                       // not settled yet: look again later
 *     await job.moveToDelayed(Date.now() + 60_000, token);
 *     throw new DelayedError();
 *   }
 *   await pool.query('INSERT INTO payouts (order_id) VALUES ($1)', [id]);
 *   return { paid: id };
 *
 * While it waits, it is removed (an operator, a `clean`, a `drain`, a Redis that lost its
 * data) and the app adds it again under its id (its reconciliation, the client's retry).
 * The same app keyed by its order (`@IdempotentJob({ key: (job) => job.data.orderId })`) and
 * enqueued with BullMQ's deduplication (`deduplication: { id, replace: true }`, which replaces
 * a delayed job: jobs.md names the case) meets the same refusal when the job of the order added
 * next replaces the one waiting between its polls.
 *
 * Why: round 74's fix, `readdedWithoutStepData` (lib/jobs/job-steps.ts), checked in
 * `IdempotentJobs.runOnce` (lib/jobs/idempotent-jobs.service.ts): the key's owner is the job's
 * own id (`id:pay-…`), its `bullmq:step-data` holds no data (a poll leaves only `{ added }`:
 * `keptStepData`, and `RELEASE_JOB_STEP` keeps "the data of the step before", of which there
 * is none), and the job added again has another `added`: taken for a job whose last step
 * "saved its next step after it moved", it is failed for good. A poll is told from that only
 * by `FORGET_JOB_STEP_DATA`, which a poll never runs.
 *
 * Expected (docs/guides/jobs.md): "A job with an id of the app's own that was removed between
 * its steps and is added again under that id is the same job: it takes its key over and goes
 * on from the step the key reached"; "A step that saves nothing new (a poll: 'not yet, look
 * again') leaves the key the data of the step before it, unchanged"; the refusal is only
 * "where the key keeps no data of its last step (the job saved its next step after it
 * moved)" — this job saved nothing.
 *
 * Control: the same apps without `@IdempotentJob()`: the job added again (or the one that
 * replaced it) polls, finds the settlement, pays once.
 *
 * Severity: medium (a permanent false failure of a correct job: the payout never made; its
 * retries fail the same way, and `keys release` is what jobs.md says not to use).
 *
 * Fails now: settled { state: 'failed', reason: "@IdempotentJob() on Payments.process: the
 * job whose steps hold this key (id:pay-o-2) is gone from its queue ..., and its key keeps no
 * data of its last step to go on from (it saved its next step after it moved) ..." } and no
 * payout (expected completed { paid: 'o-2' }, one payout); keyed and replaced by its
 * deduplication, the same words for the owner `1@<added>` (the check `seen.kind === 'gone' &&
 * !keepsStepData` in `runOnce`); both controls pass.
 *
 * Suggested fix: a step without data where the key has had no data step (no `data`, never
 * forgotten) leaves a mark of its own (`{ added, polled: true }`, or `FORGET_JOB_STEP_DATA`
 * marking `forgot: true`), and `readdedWithoutStepData` refuses only where the data was
 * forgotten (the docs' order), letting a job added again whose steps were all polls go on
 * from its own data.
 *
 * Fixed: a first step that saves nothing marks the key so: lib/jobs/job-steps.ts `keptStepData`
 * leaves `{ added, polled: true }`, and `RELEASE_JOB_STEP` (v5, lib/claim/postgres-statements.ts)
 * keeps whatever step record the key has on a later poll (data, polls, or forgotten);
 * `stepDataKept` tells `data`, `polls` and `none` (forgotten by `FORGET_JOB_STEP_DATA`, or an
 * earlier version's poll, refused as before), and `readdedWithoutStepData` and
 * `IdempotentJobs.runOnce`'s gone-owner check refuse only `none`: a job after polls goes on
 * from its own data.
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

interface Payment {
  orderId: string;
}

/** `keyed`: the job keyed by its order (`key`), not by its id. */
async function startApp(
  queue: string,
  idempotent: boolean,
  keyed = false,
): Promise<INestApplicationContext> {
  @Processor(queue)
  class Payments extends WorkerHost {
    async process(job: Job<Payment>, token?: string) {
      const { orderId } = job.data;
      const { rows } = await pool.query('SELECT 1 FROM settlements WHERE order_id = $1', [orderId]);
      if (rows.length === 0) {
        // Not settled yet: look again in a minute (nothing new to save).
        await job.moveToDelayed(Date.now() + 60_000, token);
        throw new DelayedError();
      }
      await pool.query('INSERT INTO payouts (order_id) VALUES ($1)', [orderId]);
      return { paid: orderId };
    }
  }
  if (idempotent) {
    // `@IdempotentJob()` on `process`, as written above it.
    const descriptor = Object.getOwnPropertyDescriptor(Payments.prototype, 'process')!;
    const options = keyed ? { key: (job: { data: unknown }) => (job.data as Payment).orderId } : {};
    IdempotentJob(options)(Payments.prototype, 'process', descriptor);
    Object.defineProperty(Payments.prototype, 'process', descriptor);
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

/** Added, removed while it waits after its first poll, added again under its id, settled. */
async function readded(queueName: string, orderId: string, idempotent: boolean) {
  const app = await startApp(queueName, idempotent);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  const jobId = `pay-${orderId}`;
  try {
    await events.waitUntilReady();
    const delayed = new Promise<void>((resolve) =>
      events.on('delayed', ({ jobId: id }) => id === jobId && resolve()),
    );
    const first = await queue.add('payment', { orderId }, { jobId });
    // Moved to the delayed set by its poll (its step committed before it moved).
    await delayed;
    await first.remove();
    // The PSP settles the payment; the app adds the job again under its id.
    await pool.query('INSERT INTO settlements (order_id) VALUES ($1)', [orderId]);
    const again = await queue.add('payment', { orderId }, { jobId });
    const settled = await again.waitUntilFinished(events, 30_000).then(
      (value: unknown) => ({ state: 'completed', value }),
      (error: Error) => ({ state: 'failed', reason: error.message }),
    );
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM payouts WHERE order_id = $1',
      [orderId],
    );
    return { settled, payouts: rows[0].n };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

/**
 * Keyed by its order: added, and while it waits after its first poll, replaced by BullMQ's
 * deduplication (`deduplication: { id, replace: true }`, which replaces a delayed job) with
 * another job of the order, once it is settled.
 */
async function replaced(queueName: string, orderId: string, idempotent: boolean) {
  const app = await startApp(queueName, idempotent, true);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  const deduplication = { id: `pay-${orderId}`, replace: true };
  try {
    await events.waitUntilReady();
    const first = await queue.add('payment', { orderId }, { deduplication });
    const delayed = new Promise<void>((resolve) =>
      events.on('delayed', ({ jobId: id }) => id === first.id && resolve()),
    );
    if ((await first.getState()) !== 'delayed') await delayed;
    await pool.query('INSERT INTO settlements (order_id) VALUES ($1)', [orderId]);
    const second = await queue.add('payment', { orderId }, { deduplication });
    expect(second.id).not.toBe(first.id);
    expect(await queue.getJob(first.id!)).toBeUndefined();
    const settled = await second.waitUntilFinished(events, 30_000).then(
      (value: unknown) => ({ state: 'completed', value }),
      (error: Error) => ({ state: 'failed', reason: error.message }),
    );
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM payouts WHERE order_id = $1',
      [orderId],
    );
    return { settled, payouts: rows[0].n };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 75: a polling job of its own id added again', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv75_readded_poll_first');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      `CREATE TABLE payouts (id serial PRIMARY KEY, order_id text NOT NULL);
       CREATE TABLE settlements (order_id text PRIMARY KEY)`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without @IdempotentJob(): the job added again pays once', async () => {
    const result = await readded('adv75-poll-readded-control', 'o-1', false);
    expect(result).toEqual({
      settled: { state: 'completed', value: { paid: 'o-1' } },
      payouts: 1,
    });
  }, 60_000);

  it('@IdempotentJob(): the job added again goes on from its poll and pays once', async () => {
    const result = await readded('adv75-poll-readded', 'o-2', true);
    expect(result).toEqual({
      settled: { state: 'completed', value: { paid: 'o-2' } },
      payouts: 1,
    });
  }, 60_000);

  it('control: without @IdempotentJob(), replaced by its deduplication: pays once', async () => {
    const result = await replaced('adv75-poll-replaced-control', 'o-3', false);
    expect(result).toEqual({
      settled: { state: 'completed', value: { paid: 'o-3' } },
      payouts: 1,
    });
  }, 60_000);

  it('@IdempotentJob({ key }), replaced by its deduplication: takes the poll over, pays once', async () => {
    const result = await replaced('adv75-poll-replaced', 'o-4', true);
    expect(result).toEqual({
      settled: { state: 'completed', value: { paid: 'o-4' } },
      payouts: 1,
    });
  }, 60_000);
});
