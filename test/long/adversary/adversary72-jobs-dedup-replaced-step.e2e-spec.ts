/**
 * Adversary 72: a keyed step job replaced by BullMQ's own deduplication (debounce mode,
 * `deduplication: { id, ttl, extend: true, replace: true }`) while it waits between its steps
 * leaves its key held by a job that no longer exists: the replacing job, the intent's only job
 * now, goes back to the delayed set about once a second for ever, no attempt counted, never
 * failed, and the order is never shipped.
 *
 * The app: a processor keyed by its order (`key: (job) => job.data.orderId`, `fingerprint` the
 * order, as jobs.md says for a step job) running BullMQ's step idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs): step `reserve` inserts a row, saves its
 * next step (`job.updateData({ ...data, step: 'ship' })`), `job.moveToDelayed(ts, token)`,
 * `throw new DelayedError()`; step `ship` inserts its row and returns. The producer adds each
 * order with BullMQ's debounce (https://docs.bullmq.io/guide/jobs/deduplication, "Debounce
 * mode": `replace: true` replaces a delayed job of the same id by the newest). The order is
 * added again (a client's retry) while its first job waits for `ship`.
 *
 * What happens: BullMQ removes the first job (it is delayed) and adds the second. The key's
 * steps name the first job their owner (`stepOwnerOf` = `jobIdentity`, id@timestamp:
 * lib/jobs/job-key.ts); the second job meets `stepHold` 'held' (lib/jobs/job-steps.ts) on
 * every run: `IdempotencyKeyInProgressError(1)`, delayed 1 s, no attempt
 * (lib/jobs/idempotent-jobs.service.ts `run`). Nothing can end it: the owner cannot be retried
 * (it is gone), `keys release` hands the key to no other job (jobs.md, "Limits"). The same
 * with `job.remove()`, `queue.drain(true)` or `queue.clean(…, 'delayed')` between the steps.
 * (Adversary 64 had this for a job of the app's own id, added again: that job now takes its
 * key over; a key of the app's, `key:`, has no such way.)
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "another job of its key waits in the
 * delayed set until it is done, then completes with its result" — the owner is never done
 * here. The waiting job should not wait for ever on a job BullMQ no longer has: go on from the
 * key's step (its data is kept on the key), or fail, saying so. Either way, the order's
 * `reserve` runs once.
 *
 * Control: the same retry without `replace` (BullMQ drops the second add): the first job ships.
 *
 * Severity: medium (a retried intent is silently stuck for ever: no failure, no attempt, a
 * claim and a move every second; debounce exists to replace delayed jobs, and step jobs are
 * delayed between their steps).
 *
 * Fails now: { state: 'delayed', attemptsMade: 0, reserves: 1, ships: 0 } after 8 s, the second
 * job started ~7 times.
 *
 * Fixed: a key held by the steps of a job BullMQ no longer has (`stepOwnerSeen`,
 * lib/jobs/fresh-job-data.ts: gone, or another job under its id) is taken over by the job that
 * meets it, as that job's, going on from the step the key reached with the data it left.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { DelayedError, type Job, Queue } from 'bullmq';
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

async function startApp(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
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
        await job.moveToDelayed(Date.now() + 1500, token);
        throw new DelayedError();
      }
      return { shipped: job.data.orderId };
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

async function orderRetried(queueName: string, orderId: string, replace: boolean) {
  const app = await startApp(queueName);
  const queue = new Queue(queueName, { connection: { host: '127.0.0.1', port: redis.port } });
  try {
    const deduplication = { id: orderId, ttl: 20_000, extend: true, replace };
    const first = await queue.add('order', { orderId }, { deduplication, attempts: 2 });
    // The first job did `reserve` and waits in the delayed set for `ship`.
    for (let i = 0; i < 50 && (await first.getState()) !== 'delayed'; i++) await sleep(100);
    await queue.add('order', { orderId }, { deduplication, attempts: 2 });
    await sleep(8000);
    const jobs = await queue.getJobs(['completed', 'failed', 'delayed', 'waiting', 'active']);
    const last = jobs.sort((a, b) => Number(b.id) - Number(a.id))[0];
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM steps WHERE order_id = $1',
      [orderId],
    );
    return {
      jobs: jobs.length,
      state: await last.getState(),
      attemptsMade: last.attemptsMade,
      reserves: rows.filter((row) => row.step === 'reserve').length,
      ships: rows.filter((row) => row.step === 'ship').length,
    };
  } finally {
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 72: a keyed step job replaced by BullMQ deduplication', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv72_dedup_step');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE steps (order_id text NOT NULL, step text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: the retry deduplicated (no replace): the first job ships', async () => {
    const result = await orderRetried('kept', 'o-1', false);
    expect(result).toMatchObject({ jobs: 1, state: 'completed', reserves: 1, ships: 1 });
  }, 60_000);

  it('the retry replaces the delayed step job: settles (not delayed for ever), reserve once', async () => {
    const result = await orderRetried('replaced', 'o-2', true);
    const settled = result.state === 'completed' || result.state === 'failed';
    expect({ ...result, settled }).toMatchObject({ settled: true, reserves: 1 });
  }, 60_000);
});
