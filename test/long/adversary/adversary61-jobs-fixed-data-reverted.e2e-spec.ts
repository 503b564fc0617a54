/**
 * Adversary 61: the fix jobs.md's "Limits" prescribes — "Fix the fault and retry the failed
 * job (BullMQ's `job.retry()`, or your board's): it goes on from its step" — is undone when
 * the fault is in the job's data: its next run writes the step's kept data back over the
 * operator's corrected data, and the job fails again, however often it is fixed and retried.
 *
 * The app: an `@IdempotentJob()` processor running BullMQ's step idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs): step `reserve` inserts a row, saves its
 * next step (`job.updateData({ ...data, step: 'pay' })`), moves itself
 * (`job.moveToDelayed(ts, token)`) and throws `DelayedError`; step `pay` pays the job's
 * `account` (a row) and completes. The order's account `ACC-0` is closed: `pay` throws (the
 * job's own error; attempts: 1), the job fails. An operator corrects the account in the
 * job's data (`(await queue.getJob(id)).updateData({ ...data, account: 'ACC-1' })`, what a
 * board's "edit data" does) and retries it (`job.retry()`).
 *
 * What happens: `reserve`'s `updateData` was held and committed with its step
 * (`RELEASE_JOB_STEP` v3 keeps `bullmq:step-data = { data: { account: 'ACC-0', step: 'pay' } }`
 * on the key; nothing clears it while the key is the job's). The retried run: `stepHold` lets
 * the job's own identity through, then `dataToRestore` (lib/jobs/job-steps.ts) restores
 * whenever the kept data differs from BullMQ's — it does (`ACC-1` vs `ACC-0`) — and
 * `runOnce` (lib/jobs/idempotent-jobs.service.ts) writes `{ account: 'ACC-0', step: 'pay' }`
 * back to BullMQ before the work: `pay` meets the closed account again and fails. Every fix
 * is reverted, in Redis too: the job is stuck in the failed set for good, and its key
 * (unfinished, owned by it) holds back every other job of its key.
 *
 * Expected (docs/guides/jobs.md): "Limits": "Fix the fault and retry the failed job ...: it
 * goes on from its step"; "What BullMQ sees": the step's data is given back only where "a
 * worker ... dies after the step committed, before BullMQ had the data". BullMQ had it here;
 * the data it has now is newer, written by the app.
 *
 * Controls: the same fix and retry on the job without `@IdempotentJob()` (completes, paid to
 * ACC-1); and with it, on a job whose `reserve` step saved its next step without a hold (no
 * kept data: `updateData` after the move, BullMQ's "Delaying" order) — completes, paid to
 * ACC-1: the kept step data alone reverts the fix.
 *
 * Severity: high (a job stuck forever, the documented remedy undone, silently: its data in
 * Redis is rewritten to what the operator replaced).
 *
 * Fixed: as adversary61-jobs-restore-after-move: the operator's data is newer than the step's
 * `over`, and stands.
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
  account: string;
  step: 'reserve' | 'pay';
}

/** Where `reserve` saves its next step: before its move (held, kept), or after it. */
type SaveAt = 'before-move' | 'after-move';

async function steps(job: Job<Order>, token: string | undefined, saveAt: SaveAt) {
  if (job.data.step === 'reserve') {
    await pool.query('INSERT INTO order_steps (order_id, step, account) VALUES ($1, $2, $3)', [
      job.data.orderId,
      'reserve',
      job.data.account,
    ]);
    if (saveAt === 'before-move') await job.updateData({ ...job.data, step: 'pay' });
    await job.moveToDelayed(Date.now() + 200, token);
    if (saveAt === 'after-move') await job.updateData({ ...job.data, step: 'pay' });
    throw new DelayedError();
  }
  if (job.data.account === 'ACC-0') throw new Error('account ACC-0 is closed');
  await pool.query('INSERT INTO order_steps (order_id, step, account) VALUES ($1, $2, $3)', [
    job.data.orderId,
    'pay',
    job.data.account,
  ]);
  return { paid: job.data.account };
}

async function startApp(
  queue: string,
  idempotent: boolean,
  saveAt: SaveAt,
): Promise<INestApplicationContext> {
  @Processor(queue)
  class Plain extends WorkerHost {
    process(job: Job<Order>, token?: string) {
      return steps(job, token, saveAt);
    }
  }
  @Processor(queue)
  class Decorated extends WorkerHost {
    @IdempotentJob()
    process(job: Job<Order>, token?: string) {
      return steps(job, token, saveAt);
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

const settled = (job: Job, events: QueueEvents) =>
  job.waitUntilFinished(events, 20_000).then(
    (value: unknown) => ({ completed: value }),
    (error: Error) => ({ failed: error.message }),
  );

/** Adds the order, waits for it to fail, corrects its account and retries it. */
async function fixAndRetry(queueName: string, idempotent: boolean, saveAt: SaveAt) {
  const app = await startApp(queueName, idempotent, saveAt);
  const connection = { port: redis.port };
  const queue = new Queue<Order>(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const added = await queue.add('order', {
      orderId: queueName,
      account: 'ACC-0',
      step: 'reserve',
    });
    const first = await settled(added, events);
    // The operator's fix: the account corrected in the job's data, then the job retried.
    const failed = (await queue.getJob(added.id!))!;
    await failed.updateData({ ...failed.data, account: 'ACC-1' });
    await failed.retry();
    const second = await settled(failed, events);
    const data = (await queue.getJob(added.id!))!.data;
    const { rows } = await pool.query<{ step: string; account: string }>(
      'SELECT step, account FROM order_steps WHERE order_id = $1 ORDER BY id',
      [queueName],
    );
    return {
      first,
      second,
      account: data.account,
      steps: rows.map((row) => `${row.step}:${row.account}`),
    };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

const fixed = () => ({
  first: { failed: 'account ACC-0 is closed' },
  second: { completed: { paid: 'ACC-1' } },
  account: 'ACC-1',
  steps: ['reserve:ACC-0', 'pay:ACC-1'],
});

onRedis('adversary 61: a failed step job whose data is corrected, then retried', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv61_fixed_data_reverted');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      `CREATE TABLE order_steps (id serial PRIMARY KEY, order_id text NOT NULL,
         step text NOT NULL, account text NOT NULL)`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the library, the corrected job completes', async () => {
    expect(await fixAndRetry('plain', false, 'before-move')).toEqual(fixed());
  }, 60_000);

  it('control: with it, a step that kept no data, the corrected job completes', async () => {
    expect(await fixAndRetry('unheld', true, 'after-move')).toEqual(fixed());
  }, 60_000);

  it('with it, a step that kept its data: the correction is not reverted', async () => {
    // Fails: second { failed: 'account ACC-0 is closed' }, account 'ACC-0' (the fix written
    // over in Redis), steps ['reserve:ACC-0'].
    expect(await fixAndRetry('held', true, 'before-move')).toEqual(fixed());
  }, 60_000);
});
