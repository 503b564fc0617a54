/**
 * Adversary 64: a step job with an id of the app's own (`jobId`) that failed for good and was
 * removed (`removeOnFail`, a board's "remove", an age-based clean), then added again with the
 * same `jobId` (a producer that re-sends its orders, BullMQ's own dedupe), is never run: the
 * new job waits in the delayed set for ever, no attempt counted, no failure said — held by
 * the steps of the job it is, by its key.
 *
 * The app: an `@IdempotentJob()` processor (default key: the job's id) running BullMQ's step
 * idiom (https://docs.bullmq.io/patterns/process-step-jobs): step `reserve` inserts a
 * reservation, saves its next step (`job.updateData({ ...data, step: 'pay' })`), moves
 * itself (`moveToDelayed`) and throws `DelayedError`; step `pay` pays the order's account,
 * and throws 'account closed' while it is (the job's own error; attempts: 1). The job is
 * added with `jobId: 'order-<n>'` and `removeOnFail: true`: it fails in `pay` and is removed.
 * The operator opens the account and the producer adds the order again, the same `jobId`.
 *
 * What happens: the key is the `jobId` (`jobKeyOf`, lib/jobs/job-key.ts), but the step's
 * owner is `jobIdentity(job)` = `${job.id}@${job.timestamp}` (RELEASE_JOB_STEP's
 * `bullmq:step`), and the job added again has another `timestamp`: `stepHold`
 * (lib/jobs/job-steps.ts) says `held` ("another job's steps"), `runOnce` throws
 * `IdempotencyKeyInProgressError(1)` and `run` moves the job to the delayed set for a second,
 * no attempt counted (lib/jobs/idempotent-jobs.service.ts) — for ever: the job that holds the
 * key is gone, and can never be retried. `keys release` "hands the key to no other job".
 * Nothing fails, nothing is logged as an error: the order is silently never paid.
 *
 * Expected (docs/guides/jobs.md, "Its key"): "An id of the app's own (`jobId` when it adds
 * the job) is the job: adding it again after the first was removed completes with the first
 * one's result" — the same job, which goes on from its step (or, at the very least, a job that
 * is run or fails saying why, not one held for ever by a job that no longer exists).
 *
 * Controls: the same without `@IdempotentJob()` (the job added again completes, paid); and
 * with it, the documented remedy on a job kept in the failed set (`job.retry()`) — completes.
 *
 * Severity: high (a job stuck for ever, silently, by BullMQ's ordinary retention of failed
 * jobs; no documented way out).
 *
 * Fixed: where the key is the app's own job id, the steps' owner is that id (`stepOwnerOf`):
 * the job added again is the same job, takes the key over and goes on from the step its key
 * reached (its data given back from the key).
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
  step: 'reserve' | 'pay';
}

async function steps(job: Job<Order>, token: string | undefined) {
  const { orderId } = job.data;
  if (job.data.step === 'reserve') {
    await pool.query('INSERT INTO reservations (order_id) VALUES ($1)', [orderId]);
    await job.updateData({ ...job.data, step: 'pay' });
    await job.moveToDelayed(Date.now() + 200, token);
    throw new DelayedError();
  }
  const { rows } = await pool.query<{ open: boolean }>(
    'SELECT open FROM accounts WHERE order_id = $1',
    [orderId],
  );
  if (!rows[0]?.open) throw new Error('account closed');
  await pool.query('INSERT INTO payments (order_id) VALUES ($1)', [orderId]);
  return { paid: orderId };
}

async function startApp(queue: string, idempotent: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class Plain extends WorkerHost {
    process(job: Job<Order>, token?: string) {
      return steps(job, token);
    }
  }
  @Processor(queue)
  class Decorated extends WorkerHost {
    @IdempotentJob()
    process(job: Job<Order>, token?: string) {
      return steps(job, token);
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [idempotent ? Decorated : Plain],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

/** How the job settled, or 'not settled' with its state after `ms` (generous: it takes ~1 s). */
const settled = (job: Job, events: QueueEvents, ms: number) =>
  job.waitUntilFinished(events, ms).then(
    (value: unknown) => ({ completed: value }),
    async (error: Error) =>
      /timed out/i.test(error.message)
        ? { notSettled: await job.getState(), attemptsMade: job.attemptsMade }
        : { failed: error.message },
  );

/** Adds the order, waits for it to fail, opens the account, then adds it again or retries. */
async function failAndAgain(queueName: string, idempotent: boolean, again: 'add' | 'retry') {
  await pool.query('INSERT INTO accounts (order_id, open) VALUES ($1, false)', [queueName]);
  const app = await startApp(queueName, idempotent);
  const connection = { port: redis.port };
  const queue = new Queue<Order>(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  const order: Order = { orderId: queueName, step: 'reserve' };
  const jobId = `order-${queueName}`;
  try {
    await events.waitUntilReady();
    const added = await queue.add('order', order, {
      jobId,
      attempts: 1,
      removeOnFail: again === 'add',
    });
    const first = await settled(added, events, 20_000);
    await pool.query('UPDATE accounts SET open = true WHERE order_id = $1', [queueName]);
    let second;
    if (again === 'add') {
      expect(await queue.getJob(jobId)).toBeUndefined();
      // Later than the first (BullMQ's `timestamp` is in ms): what a re-sending producer does.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const readded = await queue.add('order', order, { jobId, attempts: 1 });
      second = await settled(readded, events, 15_000);
    } else {
      const failed = (await queue.getJob(jobId))!;
      await failed.retry();
      second = await settled(failed, events, 15_000);
    }
    const payments = await pool.query('SELECT 1 FROM payments WHERE order_id = $1', [queueName]);
    return { first, second, payments: payments.rowCount };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

const paid = (orderId: string) => ({
  first: { failed: 'account closed' },
  second: { completed: { paid: orderId } },
  payments: 1,
});

onRedis('adversary 64: a failed step job removed, then added again with its jobId', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv64_readded_job');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      `CREATE TABLE accounts (order_id text PRIMARY KEY, open boolean NOT NULL);
       CREATE TABLE reservations (id serial PRIMARY KEY, order_id text NOT NULL);
       CREATE TABLE payments (id serial PRIMARY KEY, order_id text NOT NULL)`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the library, the order added again is paid', async () => {
    expect(await failAndAgain('plain', false, 'add')).toEqual(paid('plain'));
  }, 60_000);

  it('control: with it, the failed job kept and retried is paid', async () => {
    expect(await failAndAgain('retried', true, 'retry')).toEqual(paid('retried'));
  }, 60_000);

  it('with it, the order added again with its jobId is run (not held for ever)', async () => {
    // Fails: second { notSettled: 'delayed', attemptsMade: 0 }, payments 0: held by the
    // steps of the removed job (`bullmq:step` = 'order-readded@<its timestamp>').
    expect(await failAndAgain('readded', true, 'add')).toEqual(paid('readded'));
  }, 60_000);
});
