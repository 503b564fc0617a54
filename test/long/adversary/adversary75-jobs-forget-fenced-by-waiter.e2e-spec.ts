/**
 * Adversary 75: a job that saves its next step after it moved (BullMQ's docs' order: the
 * move, then `updateData`) has its key told to forget the step data it keeps
 * (`FORGET_JOB_STEP_DATA`), so that no job that takes its key over goes on from the step
 * before. That note is fenced by the job's own claim (`lock_version`, `claim_id`); another job
 * of its key that looked at the key in between (it claims it, finds it held, and gives it back:
 * every 2 to 60 seconds while it waits) moved `lock_version` on, and the note changes nothing.
 * The key keeps the data of the step before; when the job is gone (removed, replaced by its
 * deduplication), the waiting job takes its steps over from there: it does the step again.
 *
 * The app: a processor keyed by the order (`key`, with `fingerprint` of the order, as jobs.md
 * says for a job that updates its data), on the pool seam, in BullMQ's step idiom:
 *   - `reserve`: a row; `updateData({ step: 'ship' })`, then `moveToDelayed`, `DelayedError`;
 *   - `ship`: a row (the carrier's booking); `moveToDelayed(+60 s)`, then (an await of its
 *     own: a notification sent) `updateData({ step: 'notify' })`, `DelayedError` (the docs'
 *     order, https://docs.bullmq.io/patterns/process-step-jobs);
 *   - `notify`: a row, done.
 * A second job of the order comes while the first ships (a client's retry) and waits. The first
 * is then removed between its steps (an operator's clean; or BullMQ's deduplication replacing
 * it), and the second, promoted, takes the key over.
 *
 * Why: lib/jobs/idempotent-jobs.service.ts `forgetStepData` runs `FORGET_JOB_STEP_DATA`
 * (lib/claim/postgres-statements.ts) `WHERE ... lock_version = $4 AND claim_id = $5`, the claim
 * the job's run began with; the waiting job's claim (`claimOrDecide` takes over the unlocked
 * row: `lock_version = lock_version + 1`) and release (`rollBackAndRelease(...,
 * 'job_step_held')`) came between the step's commit and the note. The key keeps
 * `bullmq:step-data` of `reserve` (`{ step: 'ship' }`: `RELEASE_JOB_STEP` kept it through the
 * `ship` step, which held no data), and `runOnce` restores it to the job that takes over
 * (`keepsStepData`, `dataToRestore`).
 *
 * Expected (docs/guides/jobs.md): "data the job writes after it moved (BullMQ's docs' order:
 * the move, then `updateData`) is written to BullMQ at once, and the key keeps no step data
 * from then on (what it kept is not the next step's)"; the other job "takes its steps over
 * and goes on from the step its key reached ... or, where the key keeps none (the job saved its
 * next step after it moved), fails for good saying so (`JobStepOwnerGoneError`) rather than do
 * the steps again".
 *
 * Control: the same, the second job added once the first saved its next step: it fails for good
 * (`JobStepOwnerGoneError`, "gone from its queue"), the booking made once.
 *
 * Severity: high (the carrier booked twice: a step's effect done again).
 *
 * Fails now: steps ['reserve', 'ship', 'ship'] (expected ['reserve', 'ship']): the second job
 * was given `{ step: 'ship' }` back and shipped again; the key's `bullmq:step-data` still held
 * the `reserve` step's data at lock_version 2 after the first job's save. Control passes.
 *
 * Suggested fix: fence the forget by the step the job committed, not by its claim (a
 * `bullmq:step` owner and the step data's `added` and `data` it wrote, as
 * `MARK_JOB_STEP_DATA_WRITTEN` is fenced by the data), so that another job's look at the key
 * does not void it; or let the waiting job's release leave `lock_version` as it was.
 *
 * Fixed: `RELEASE_JOB_STEP` (v5, lib/claim/postgres-statements.ts) keeps on the step's record
 * the claim's version the step committed at (`version`), and `FORGET_JOB_STEP_DATA` (v2) is
 * fenced by it and the claim id, not by the key's `lock_version` now: another job's look at
 * the key no longer voids the forget. lib/jobs/idempotent-jobs.service.ts `forgetStepData`
 * logs an error where the forget matched no row (its step no longer the key's last), as where
 * it failed.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, OnWorkerEvent, Processor, WorkerHost } from '@nestjs/bullmq';
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
  step?: 'ship' | 'notify';
}

/** The first job's wait between its move and its `updateData` in `ship` (its notification). */
let notified: () => Promise<void> = () => Promise.resolve();
/** Told when the first job has shipped and moved. */
let shippedAndMoved: () => void = () => undefined;

async function startApp(queue: string): Promise<INestApplicationContext> {
  // Two jobs at once, as a worker of `concurrency: 2` takes them.
  @Processor(queue, { concurrency: 2 })
  class Orders extends WorkerHost {
    // BullMQ's lock renewal of a job that moved itself and still runs (its await before the
    // save) fails, and says so on the worker's 'error': as without the library.
    @OnWorkerEvent('error')
    onError() {}

    @IdempotentJob({
      key: (job) => (job.data as Order).orderId,
      fingerprint: (job) => ({ orderId: (job.data as Order).orderId }),
    })
    async process(job: Job<Order>, token?: string) {
      const { orderId } = job.data;
      const step = job.data.step ?? 'reserve';
      await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [orderId, step]);
      if (step === 'reserve') {
        await job.updateData({ ...job.data, step: 'ship' });
        await job.moveToDelayed(Date.now() + 100, token);
        throw new DelayedError();
      }
      if (step === 'ship') {
        await job.moveToDelayed(Date.now() + 60_000, token);
        shippedAndMoved();
        await notified();
        await job.updateData({ ...job.data, step: 'notify' });
        throw new DelayedError();
      }
      return { done: orderId };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Orders],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

/** `waiterBetween`: the second job comes (and is turned away) between the move and the save. */
async function run(queueName: string, orderId: string, waiterBetween: boolean) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  notified = () => released;
  const moved = new Promise<void>((resolve) => (shippedAndMoved = resolve));
  const app = await startApp(queueName);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const delayedOnce = (jobId: string) =>
      new Promise<void>((resolve) => events.on('delayed', (e) => e.jobId === jobId && resolve()));
    await queue.add('order', { orderId }, { jobId: 'first' });
    await moved;
    const secondTurnedAway = delayedOnce('second');
    if (waiterBetween) {
      // The second job comes now: it claims the key, finds it held, and waits.
      await queue.add('order', { orderId }, { jobId: 'second' });
      await secondTurnedAway;
      release();
    } else {
      release();
    }
    // The first job's save after its move: BullMQ has it.
    for (let i = 0; i < 200; i++) {
      const first = await queue.getJob('first');
      if ((first?.data as Order | undefined)?.step === 'notify') break;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    if (!waiterBetween) {
      await queue.add('order', { orderId }, { jobId: 'second' });
      await secondTurnedAway;
    }
    // The first job is removed between its steps; the second comes back at once.
    await (await queue.getJob('first'))!.remove();
    const second = (await queue.getJob('second'))!;
    // Its next run's end: failed, completed, or moved itself on after a step of its own.
    const settled = new Promise<string>((resolve) => {
      events.on('failed', (e) => e.jobId === 'second' && resolve(`failed: ${e.failedReason}`));
      events.on('completed', (e) => e.jobId === 'second' && resolve('completed'));
      events.on('delayed', (e) => e.jobId === 'second' && resolve('stepped'));
    });
    await second.promote();
    await settled;
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM steps WHERE order_id = $1 ORDER BY id',
      [orderId],
    );
    return { settled: await settled, steps: rows.map((row) => row.step) };
  } finally {
    release();
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 75: a waiting job voids the forget of a step saved after its move', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv75_forget_fenced');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: the second job comes after the save: it fails for good, shipped once', async () => {
    const result = await run('adv75-forget-control', 'o-1', false);
    expect(result.settled).toMatch(/^failed: .*gone from its queue/);
    expect(result.steps).toEqual(['reserve', 'ship']);
  }, 60_000);

  it('the second job looked at the key between the move and the save: shipped once', async () => {
    const result = await run('adv75-forget-between', 'o-2', true);
    expect(result.steps).toEqual(['reserve', 'ship']);
  }, 60_000);
});
