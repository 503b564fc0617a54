/**
 * Adversary 72: a job that waits for its key, held between another job's steps, is failed for
 * good by BullMQ's `maxStartedAttempts` (a worker option against jobs that loop): the library
 * brings it back once a second, each time a start, and it is failed "started more than
 * allowable limit" before the step job it waits for is done. The same intent, enqueued twice,
 * then has one job completed and one in the failed set, its alert raised for nothing.
 *
 * The app: a processor keyed by its order (`key: (job) => job.data.orderId`, `fingerprint`
 * the order, as jobs.md says for a step job) running BullMQ's step idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs): step `reserve` inserts a row, saves its
 * next step, `job.moveToDelayed(Date.now() + 6000, token)`, `throw new DelayedError()`; step
 * `ship` inserts its row and returns. Its worker has `maxStartedAttempts: 4` (BullMQ: "the
 * maximum number of times a job is allowed to start processing ... moved to the failed state
 * with an UnrecoverableError"); each step job starts twice. The order is enqueued again (a
 * client's retry) while the first job waits for `ship`.
 *
 * What happens: the second job meets the key held by the first job's steps (`stepHold` 'held':
 * lib/jobs/job-steps.ts) and is moved to the delayed set for one second
 * (`IdempotencyKeyInProgressError(1)`, lib/jobs/idempotent-jobs.service.ts `runOnce`, then
 * `run`'s `moveToDelayed`): no attempt, but a start each time (BullMQ counts `attemptsStarted`
 * as it moves a job to active). After four, BullMQ fails it for good, while the first job has
 * five seconds of its delay left.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): a job that moves itself ... "another job
 * of its key waits in the delayed set until it is done, then completes with its result". Its
 * wait should not cost it more starts than the step job's delay needs (it could wait as long as
 * the owner's delay, not poll each second).
 *
 * Control: the same two jobs on a worker without `maxStartedAttempts`: the second completes
 * with the first one's result, `ship` once.
 *
 * Severity: low-medium (a duplicate of an intent that completed is in the failed set, with
 * BullMQ's "started more than allowable limit"; `maxStartedAttempts` is BullMQ's own guard
 * for step jobs, and a step's delay of minutes costs the waiting job a start per second).
 *
 * Fails now: the second job { state: 'failed', failedReason: 'job started more than allowable
 * limit' }.
 *
 * Fixed: a job waiting on a key held by a job delayed until its next step comes back after
 * that job's delay (BullMQ's `delay` of it, a minute at most), not each second
 * (`stepOwnerSeen`, lib/jobs/fresh-job-data.ts).
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
        await job.moveToDelayed(Date.now() + 6000, token);
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
    for (let i = 0; i < 50 && (await first.getState()) !== 'delayed'; i++) await sleep(100);
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

onRedis('adversary 72: a job waiting on a held key, and maxStartedAttempts', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv72_started');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE steps (order_id text NOT NULL, step text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without maxStartedAttempts the second job completes with the first result', async () => {
    const result = await orderTwice('unbounded', 'o-1');
    expect(result).toMatchObject({
      first: { state: 'completed', value: { shipped: 'o-1', by: '1' } },
      second: { state: 'completed', value: { shipped: 'o-1', by: '1' } },
      ships: 1,
    });
  }, 60_000);

  it('maxStartedAttempts 4: the waiting job still completes with the first result', async () => {
    const result = await orderTwice('bounded', 'o-2', 4);
    expect(result).toMatchObject({
      first: { state: 'completed', value: { shipped: 'o-2', by: '1' } },
      second: { state: 'completed', value: { shipped: 'o-2', by: '1' } },
      ships: 1,
    });
  }, 60_000);
});
