/**
 * Adversary 75: a job that fails keeps, on the job object its worker's `failed` event carries,
 * the data it gave `job.updateData()` (and the progress it gave `job.updateProgress()`) during
 * its run, though the library rolled its work back and never wrote that data to BullMQ. An app
 * that moves a failed job to a dead-letter queue from that event (BullMQ's and
 * `@nestjs/bullmq`'s ordinary `@OnWorkerEvent('failed')`) carries the rolled-back step in it:
 * the dead letter, replayed once the fault is fixed, skips the step whose work is gone.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam, BullMQ's step idiom:
 *
 *   if (job.data.step !== 'booked') {
 *     await pool.query('INSERT INTO bookings (order_id) VALUES ($1)', [orderId]);
 *     await job.updateData({ ...job.data, step: 'booked' });
 *   }
 *   if (!job.data.carrierUp) throw new Error('the carrier is down');
 *   await pool.query('INSERT INTO shipments (order_id) VALUES ($1)', [orderId]);
 *
 *   @OnWorkerEvent('failed')
 *   async deadLetter(job: Job<Order>) {       // replayed later, once the carrier is up
 *     await this.queue.add('ship', { ...job.data, carrierUp: true }, { jobId: `${job.id}-dl` });
 *   }
 *
 * Why: lib/jobs/job-steps.ts `stepJob` sets the job's `data` (and `progress`) at the held call
 * (`Reflect.set(job, 'data', data)`: "the job reads its new data at once"), and its `release()`
 * gives the job back its methods, not its data: where the work rolled back
 * (lib/jobs/idempotent-jobs.service.ts `runStepped`, `rollBackAndRelease(..., 'job_failed')`),
 * the held data is dropped but stays on the object, which BullMQ's worker then hands to its
 * `failed` listeners.
 *
 * Expected (docs/guides/jobs.md): "`job.updateData()` during the job's run, until its work
 * committed, is held: the job reads its new data at once, and BullMQ gets it once that work
 * committed ..., or never, if it rolled back. So BullMQ's step idiom (the next step saved in the
 * job's data) never skips a step whose work a failure rolled back"; "throws | its own error, as
 * without the library (attempts, backoff, the failed set); its work rolled back". Without the
 * library, the job object's data is what BullMQ has and the booking stood.
 *
 * Control: the same app without `@IdempotentJob()`: the dead letter skips the booking, which
 * stood: booked once, shipped once.
 *
 * Severity: medium (an effect lost: the order shipped, never booked, under a completed job).
 *
 * Fails now: { bookings: 0, shipments: 1 } after the dead letter completed (expected one of
 * each); the failed event's job had data { step: 'booked' } that BullMQ never had.
 *
 * Suggested fix: where the run's work rolled back, give the job object back the data and
 * progress BullMQ has (the `written` JSON, the progress of before) as `release()` gives back
 * its methods.
 *
 * Fixed: lib/jobs/job-steps.ts `stepJob` keeps the data and progress BullMQ has (as first
 * given, then as each write reached BullMQ), and its `release()`, at the end of every run
 * (`IdempotentJobs.runOnce`'s `finally`), sets them back on the job object where data or
 * progress is still held (never written: the work rolled back), before BullMQ's worker hands
 * the object to its `failed` listeners.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, InjectQueue, OnWorkerEvent, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents } from 'bullmq';
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
  step?: 'booked';
  carrierUp?: boolean;
}

async function startApp(queue: string, idempotent: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class Shipping extends WorkerHost {
    constructor(@InjectQueue(queue) private readonly queue: Queue) {
      super();
    }

    async process(job: Job<Order>) {
      const { orderId } = job.data;
      if (job.data.step !== 'booked') {
        await pool.query('INSERT INTO bookings (order_id) VALUES ($1)', [orderId]);
        await job.updateData({ ...job.data, step: 'booked' });
      }
      if (!job.data.carrierUp) throw new Error('the carrier is down');
      await pool.query('INSERT INTO shipments (order_id) VALUES ($1)', [orderId]);
      return { shipped: orderId };
    }

    // The dead-letter queue of the app: the failed job again, once the carrier is up.
    @OnWorkerEvent('failed')
    async deadLetter(job: Job<Order>) {
      await this.queue.add('ship', { ...job.data, carrierUp: true }, { jobId: `${job.id}-dl` });
    }
  }
  if (idempotent) {
    // `@IdempotentJob()` on `process`, as written above it.
    const descriptor = Object.getOwnPropertyDescriptor(Shipping.prototype, 'process')!;
    IdempotentJob()(Shipping.prototype, 'process', descriptor);
    Object.defineProperty(Shipping.prototype, 'process', descriptor);
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Shipping],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

async function ship(queueName: string, orderId: string, idempotent: boolean) {
  const app = await startApp(queueName, idempotent);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const deadLetterDone = new Promise<string>((resolve) => {
      events.on('completed', ({ jobId }) => jobId.endsWith('-dl') && resolve('completed'));
      events.on(
        'failed',
        ({ jobId, failedReason }) => jobId.endsWith('-dl') && resolve(failedReason),
      );
    });
    await queue.add('ship', { orderId });
    const deadLetter = await deadLetterDone;
    const count = async (table: string) =>
      (
        await pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${table} WHERE order_id = $1`,
          [orderId],
        )
      ).rows[0].n;
    return { deadLetter, bookings: await count('bookings'), shipments: await count('shipments') };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 75: a failed job carries its rolled-back data to its failed event', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv75_failed_event_data');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      `CREATE TABLE bookings (id serial PRIMARY KEY, order_id text NOT NULL);
       CREATE TABLE shipments (id serial PRIMARY KEY, order_id text NOT NULL)`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without @IdempotentJob(): the dead letter ships; booked once', async () => {
    expect(await ship('adv75-dead-letter-control', 'o-1', false)).toEqual({
      deadLetter: 'completed',
      bookings: 1,
      shipments: 1,
    });
  }, 60_000);

  it('@IdempotentJob(): the dead letter books what was rolled back, then ships', async () => {
    expect(await ship('adv75-dead-letter', 'o-2', true)).toEqual({
      deadLetter: 'completed',
      bookings: 1,
      shipments: 1,
    });
  }, 60_000);
});
