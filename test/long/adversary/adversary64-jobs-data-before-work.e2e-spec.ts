/**
 * Adversary 64: `job.updateData()` is held only once the job's transaction has begun: a step
 * that saves its next step before its first statement (its data, then its work) has that
 * data written to BullMQ at once, and an error that rolls the step's work back leaves BullMQ
 * saying it was done. The job's retry skips the step: the work the hold exists to protect is
 * lost, and the job goes on (here, fails for good) without it.
 *
 * The app: an `@IdempotentJob()` processor running BullMQ's step idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs), `attempts: 2`. Step `reserve` saves its
 * next step (`job.updateData({ ...data, step: 'pay' })`), inserts a reservation, then fails
 * once after it ('lock timeout', the job's own error: the insert rolls back, BullMQ's second
 * attempt runs). Step `pay` pays against the order's reservation, and throws 'no
 * reservation' without one.
 *
 * What happens: `stepJob` (lib/jobs/job-steps.ts) holds `updateData` while `pending()`, which
 * `runOnce` (lib/jobs/idempotent-jobs.service.ts) gives as `transaction.begun &&
 * !transaction.ended`; `begun` (lib/transaction/request-transaction.ts) is false until the
 * code's first statement. So `step: 'pay'` goes to BullMQ at once; the insert then begins the
 * transaction, the error rolls it back, and the second attempt reads `step: 'pay'`: no
 * reservation, 'no reservation', failed for good. The step was skipped after its work
 * rolled back.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "`job.updateData()` while the job's
 * work is uncommitted is held ... BullMQ gets it once that work committed (its step, or its
 * result), or never, if it rolled back. So BullMQ's step idiom (the next step saved in the
 * job's data) never skips a step whose work a failure rolled back." The run's work is
 * uncommitted from its start: nothing of it commits before its step or its result.
 *
 * Control: the same job saving its next step after its insert (held): the second attempt
 * reserves again and pays.
 *
 * Severity: medium (a step's work lost, the job going on without it; the order of
 * `updateData` and the step's first statement, which the guide does not mention, decides).
 *
 * Fixed: `updateData()` is held from the run's start (`!transaction.ended`), not from its first
 * statement.
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

/** Where `reserve` saves its next step: before its first statement, or after it. */
type SaveAt = 'before-work' | 'after-work';

/** Failures left for each order's `reserve` step (one: its first attempt fails). */
const failuresLeft = new Map<string, number>();

async function steps(job: Job<Order>, token: string | undefined, saveAt: SaveAt) {
  const { orderId } = job.data;
  if (job.data.step === 'reserve') {
    if (saveAt === 'before-work') await job.updateData({ ...job.data, step: 'pay' });
    await pool.query('INSERT INTO reservations (order_id) VALUES ($1)', [orderId]);
    if (saveAt === 'after-work') await job.updateData({ ...job.data, step: 'pay' });
    const left = failuresLeft.get(orderId) ?? 0;
    if (left > 0) {
      failuresLeft.set(orderId, left - 1);
      throw new Error('lock timeout');
    }
    await job.moveToDelayed(Date.now() + 200, token);
    throw new DelayedError();
  }
  const { rowCount } = await pool.query('SELECT 1 FROM reservations WHERE order_id = $1', [
    orderId,
  ]);
  if (!rowCount) throw new Error('no reservation');
  await pool.query('INSERT INTO payments (order_id) VALUES ($1)', [orderId]);
  return { paid: orderId };
}

async function startApp(queue: string, saveAt: SaveAt): Promise<INestApplicationContext> {
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
    providers: [Decorated],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

async function order(queueName: string, saveAt: SaveAt) {
  failuresLeft.set(queueName, 1);
  const app = await startApp(queueName, saveAt);
  const connection = { port: redis.port };
  const queue = new Queue<Order>(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const added = await queue.add(
      'order',
      { orderId: queueName, step: 'reserve' },
      { attempts: 2 },
    );
    const outcome = await added.waitUntilFinished(events, 20_000).then(
      (value: unknown) => ({ completed: value }),
      (error: Error) => ({ failed: error.message }),
    );
    const count = async (table: string) =>
      (await pool.query(`SELECT 1 FROM ${table} WHERE order_id = $1`, [queueName])).rowCount;
    return {
      outcome,
      reservations: await count('reservations'),
      payments: await count('payments'),
    };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

const paid = (orderId: string) => ({
  outcome: { completed: { paid: orderId } },
  reservations: 1,
  payments: 1,
});

onRedis('adversary 64: a step that saves its next step before its first statement', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv64_data_before_work');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      `CREATE TABLE reservations (id serial PRIMARY KEY, order_id text NOT NULL);
       CREATE TABLE payments (id serial PRIMARY KEY, order_id text NOT NULL)`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: saved after its insert (held), the retried step reserves again and pays', async () => {
    expect(await order('after', 'after-work')).toEqual(paid('after'));
  }, 60_000);

  it('saved before its insert, the step whose work rolled back is not skipped', async () => {
    // Fails: outcome { failed: 'no reservation' }, reservations 0, payments 0: BullMQ had
    // `step: 'pay'` before the step's work began, and kept it when the work rolled back.
    expect(await order('before', 'before-work')).toEqual(paid('before'));
  }, 60_000);
});
