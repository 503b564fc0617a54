/**
 * Adversary 74: round 73's fix for a job waiting on a key held between another job's steps
 * (back after 2, 4, 8… s by its own starts, not each second) covers an owner 'delayed' or
 * waiting; an owner that is ACTIVE (BullMQ runs it) but has not taken the key back yet is
 * 'there', and the waiting job still comes back each second, a start each time: BullMQ's
 * `maxStartedAttempts` fails it for good while the owner goes on and completes.
 *
 * The app: a processor keyed by its order (`key`, `fingerprint` the order, as jobs.md says for
 * a step job) on the pool seam. `process(job, token)` is `WorkerHost.process`; before its
 * `ship` step it fetches the carrier's label (6 s here; a slow partner, outside any
 * transaction, as one should), then calls the decorated method with the job and its token
 * (jobs.md: "or a method that `process` calls with the job and its token ... must be given
 * it"). Step `reserve` inserts a row, saves its next step (`updateData`, then
 * `moveToDelayed(Date.now() + 300)`, `DelayedError`); step `ship` inserts its row and returns.
 * Its worker has `concurrency: 2` and `maxStartedAttempts: 4`. The order is enqueued again (a client's retry) once
 * the first job is back at work on its `ship` step. The same 'there' meets a job whose owner's
 * worker was SIGKILLed mid-step: its lease (5 s) runs out long before BullMQ's stalled checker
 * (lockDuration 30 s, stalledInterval 30 s) moves the dead owner out of 'active'.
 *
 * Why: lib/jobs/fresh-job-data.ts `stepOwnerSeen` answers `{ kind: 'there' }` for an owner
 * whose state is 'active', and `runOnce` (lib/jobs/idempotent-jobs.service.ts) gives it
 * `waitSeconds = 1` (only 'delayed' and 'waiting' wait longer): `run` moves the waiting job to
 * the delayed set for 1 s each time, and BullMQ counts a start each time it comes back.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "another job of its key waits in the
 * delayed set until it is done (back after that job's own delay, a minute at most ...), then
 * completes with its result".
 *
 * Control: the same two jobs on a worker without `maxStartedAttempts`: the second completes
 * with the first one's result, `ship` once.
 *
 * Severity: low-medium (as adversary 73's: a duplicate of an intent that completed lands in
 * the failed set; an owner whose worker died costs a waiting job up to a minute of starts).
 *
 * Fails now: the second job { state: 'failed' } (its starts spent at one a second while the
 * owner fetched its label), the first completed, `ship` once; control passes.
 *
 * Suggested fix: back off for an active owner too (2, 4, 8… s by the job's own starts, as for
 * 'waiting'), or for the time left of the owner's BullMQ lock.
 *
 * Fixed: a waiter whose key's owner is active waits 2, 4, 8… s by its own starts, as for a
 * waiting owner (`waitSecondsFor`, lib/jobs/fresh-job-data.ts, used by `IdempotentJobs.runOnce`).
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
  step?: 'reserve' | 'ship';
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function startApp(queue: string, maxStartedAttempts?: number) {
  @Processor(queue, { maxStartedAttempts, concurrency: 2 })
  class Orders extends WorkerHost {
    async process(job: Job<Order>, token?: string) {
      // The carrier's label for the ship step: a slow partner, before the job's transaction.
      if (job.data.step === 'ship') await sleep(6000);
      return this.order(job, token);
    }

    @IdempotentJob({
      key: (job) => (job.data as Order).orderId,
      fingerprint: (job) => ({ orderId: (job.data as Order).orderId }),
    })
    async order(job: Job<Order>, token?: string) {
      const step = job.data.step ?? 'reserve';
      await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
        job.data.orderId,
        step,
      ]);
      if (step === 'reserve') {
        await job.updateData({ ...job.data, step: 'ship' });
        await job.moveToDelayed(Date.now() + 300, token);
        throw new DelayedError();
      }
      return { shipped: job.data.orderId, by: job.id };
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

async function orderTwice(queueName: string, orderId: string, maxStartedAttempts?: number) {
  const app: INestApplicationContext = await startApp(queueName, maxStartedAttempts);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const first = await queue.add('order', { orderId });
    // Back at work on its ship step (its second start, active).
    for (let i = 0; i < 100; i++) {
      const now = (await queue.getJob(first.id!))!;
      if (now.attemptsStarted >= 2 && (await now.getState()) === 'active') break;
      await sleep(50);
    }
    const second = await queue.add('order', { orderId });
    const settle = (job: Job) =>
      job.waitUntilFinished(events, 20_000).then(
        (value: unknown) => ({ state: 'completed', value }),
        (error: Error) => ({ state: 'failed', reason: error.message }),
      );
    const [one, two] = await Promise.all([settle(first), settle(second)]);
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM steps WHERE order_id = $1',
      [orderId],
    );
    return { first: one, second: two, ships: rows.filter((row) => row.step === 'ship').length };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 74: a job waiting on a key whose step owner is active', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv74_active_owner');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE steps (order_id text NOT NULL, step text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without maxStartedAttempts the second job completes with the first result', async () => {
    const result = await orderTwice('active-unbounded', 'o-1');
    expect(result).toMatchObject({
      first: { state: 'completed', value: { shipped: 'o-1', by: '1' } },
      second: { state: 'completed', value: { shipped: 'o-1', by: '1' } },
      ships: 1,
    });
  }, 60_000);

  it('maxStartedAttempts 4: the waiting job still completes with the first result', async () => {
    const result = await orderTwice('active-bounded', 'o-2', 4);
    expect(result).toMatchObject({
      first: { state: 'completed', value: { shipped: 'o-2', by: '1' } },
      second: { state: 'completed', value: { shipped: 'o-2', by: '1' } },
      ships: 1,
    });
  }, 60_000);
});
