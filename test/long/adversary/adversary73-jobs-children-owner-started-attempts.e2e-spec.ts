/**
 * Adversary 73: round 72's fix for a job waiting on a key held between another job's steps
 * (back after the owner's delay, not each second) covers only an owner in the delayed set. An
 * owner waiting for its children (BullMQ's `moveToWaitingChildren`, the step idiom's other
 * move, a flow parent that adds a child and waits for it) still costs the waiting job a start
 * each second, and BullMQ's `maxStartedAttempts` fails it for good while the owner waits.
 *
 * The app: a processor keyed by its order (`key`, `fingerprint` the order, as jobs.md says for
 * a step job). Step `reserve` inserts a row, saves its next step, adds a child job (the
 * carrier's label, in its own queue, ready in 6 s: `delay: 6000`, `parent` this job), then
 * `job.moveToWaitingChildren(token)` and `throw new WaitingChildrenError()`; step `ship`
 * inserts its row and returns. Its worker has `maxStartedAttempts: 4`. The order is enqueued
 * again (a client's retry) while the first job waits for its child.
 *
 * Why: lib/jobs/fresh-job-data.ts `stepOwnerSeen` tells 'delayed' only (`state === 'delayed'
 * && delayMs > 0`); an owner in 'waiting-children' is 'there', and `runOnce`
 * (lib/jobs/idempotent-jobs.service.ts) throws `IdempotencyKeyInProgressError(1)`: `run`
 * moves the waiting job to the delayed set for 1 s, a start each time (BullMQ counts
 * `attemptsStarted` as it moves a job to active).
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): a job that "moves itself and throws
 * BullMQ's `DelayedError` (...; also `WaitingChildrenError`, ...)": "another job of its key
 * waits in the delayed set until it is done (back after that job's own delay, a minute at
 * most: each return is a start BullMQ counts against `maxStartedAttempts`), then completes with
 * its result".
 *
 * Control: the same two jobs on a worker without `maxStartedAttempts`: the second completes
 * with the first one's result, `ship` once.
 *
 * Severity: low-medium (as adversary 72's: a duplicate of an intent that completed lands in
 * the failed set; a child that takes minutes costs a start a second).
 *
 * Fails now: the second job { state: 'failed' } (its starts spent at one a second), the first
 * completed, `ship` once; control passes.
 *
 * Fixed: a job waiting on an owner there but not delayed (waiting for its children) comes back
 * after 2, 4, 8… seconds by its own starts, a minute at most (`stepOwnerSeen` 'waiting').
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents, WaitingChildrenError, Worker } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;
let labels: Queue;

interface Order {
  orderId: string;
  step?: 'reserve' | 'ship';
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function startApp(queue: string, maxStartedAttempts?: number) {
  @Processor(queue, { maxStartedAttempts })
  class Orders extends WorkerHost {
    @IdempotentJob({
      key: (job) => (job.data as Order).orderId,
      fingerprint: (job) => ({ orderId: (job.data as Order).orderId }),
    })
    async process(job: Job<Order>, token?: string) {
      const step = job.data.step ?? 'reserve';
      await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
        job.data.orderId,
        step,
      ]);
      if (step === 'reserve') {
        await job.updateData({ ...job.data, step: 'ship' });
        // The carrier's label, ready in 6 s; this job waits for it.
        await labels.add(
          'label',
          { orderId: job.data.orderId },
          { delay: 6000, parent: { id: job.id!, queue: job.queueQualifiedName } },
        );
        if (await job.moveToWaitingChildren(token!)) throw new WaitingChildrenError();
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
  labels = new Queue(`${queueName}-labels`, { connection });
  const labeller = new Worker(`${queueName}-labels`, async () => ({ label: 'ok' }), { connection });
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const first = await queue.add('order', { orderId });
    for (let i = 0; i < 50 && (await first.getState()) !== 'waiting-children'; i++)
      await sleep(100);
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
    await labeller.close();
    await labels.obliterate({ force: true }).catch(() => undefined);
    await labels.close();
    await app.close();
  }
}

onRedis('adversary 73: a job waiting on a key held by a parent waiting for its children', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv73_children_started');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE steps (order_id text NOT NULL, step text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without maxStartedAttempts the second job completes with the first result', async () => {
    const result = await orderTwice('children-unbounded', 'o-1');
    expect(result).toMatchObject({
      first: { state: 'completed', value: { shipped: 'o-1', by: '1' } },
      second: { state: 'completed', value: { shipped: 'o-1', by: '1' } },
      ships: 1,
    });
  }, 60_000);

  it('maxStartedAttempts 4: the waiting job still completes with the first result', async () => {
    const result = await orderTwice('children-bounded', 'o-2', 4);
    expect(result).toMatchObject({
      first: { state: 'completed', value: { shipped: 'o-2', by: '1' } },
      second: { state: 'completed', value: { shipped: 'o-2', by: '1' } },
      ships: 1,
    });
  }, 60_000);
});
