/**
 * Adversary 75b: round 75's fix gives a failed job's object back "BullMQ's data" by putting
 * back the object BullMQ first gave the run (`job.data` as it was), not what BullMQ has: a job
 * that saves its step the ordinary JavaScript way, by changing `job.data` and saving it
 * (`job.data.step = 'booked'; await job.updateData(job.data)`), changed that very object, and
 * the `failed` event's job still carries the rolled-back step. A dead letter made from it skips
 * the step whose work is gone (round 75's dead-letter break, by the other common idiom).
 *
 * The app: an `@IdempotentJob()` processor on the pool seam, BullMQ's step idiom:
 *
 *   if (job.data.step !== 'booked') {
 *     await pool.query('INSERT INTO bookings (order_id) VALUES ($1)', [orderId]);
 *     job.data.step = 'booked';
 *     await job.updateData(job.data);
 *   }
 *   if (!job.data.carrierUp) throw new Error('the carrier is down');
 *   await pool.query('INSERT INTO shipments (order_id) VALUES ($1)', [orderId]);
 *
 *   @OnWorkerEvent('failed')
 *   async deadLetter(job: Job<Order>) {       // replayed later, once the carrier is up
 *     await this.queue.add('ship', { ...job.data, carrierUp: true }, { jobId: `${job.id}-dl` });
 *   }
 *
 * Why: lib/jobs/job-steps.ts `stepJob` keeps BullMQ's data as a reference
 * (`let bullmqData = Reflect.get(job, 'data')`), and `release()` sets it back where data is
 * still held (`Reflect.set(job, 'data', bullmqData)`). The job changed that object in place
 * before the held call: the reference now holds the rolled-back step. The run knows what BullMQ
 * has as JSON (`written`), which nothing in the job can change, but restores the live object.
 *
 * Expected (docs/guides/jobs.md): "where it rolled back, the job object has BullMQ's data back
 * (and its progress), so that what BullMQ's `failed` listeners get (a dead-letter queue) says
 * what stands". BullMQ has `{ orderId }` (its step never written); the object says 'booked'.
 * Without the library BullMQ wrote the step, and the booking stood.
 *
 * Control: the same app without `@IdempotentJob()`: the dead letter skips the booking, which
 * stood: booked once, shipped once.
 *
 * Severity: medium (an effect lost: the order shipped, never booked, under a completed job).
 *
 * Fails now: { bookings: 0, shipments: 1 } after the dead letter completed (expected one of
 * each).
 *
 * Suggested fix: restore from what BullMQ was given, not from a live reference: keep
 * `bullmqData` as `JSON.parse(written)` (a copy of the JSON BullMQ has, as BullMQ's own
 * `Job.fromJSON` would read it back), or copy the data at `stepJob` (structuredClone) and at
 * each write that reached BullMQ; the same for `bullmqProgress` (an object progress changed in
 * place before `updateProgress(job.progress)`).
 *
 * Fixed: `stepJob` (lib/jobs/job-steps.ts) keeps the JSON of the data and progress BullMQ has
 * (`written`, `progressWritten`), never the objects the job may change in place, and
 * `release()` gives the job copies parsed from them.
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
        // The step saved by changing the data BullMQ gave and saving it.
        job.data.step = 'booked';
        await job.updateData(job.data);
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

onRedis(
  'adversary 75b: a failed job that changed job.data in place carries its rolled-back step',
  () => {
    beforeAll(async () => {
      redis = await startTestRedis();
      database = await createMigratedDatabase('adv75b_failed_event_mutated');
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
      expect(await ship('adv75b-mutated-dead-letter-control', 'o-1', false)).toEqual({
        deadLetter: 'completed',
        bookings: 1,
        shipments: 1,
      });
    }, 60_000);

    it("@IdempotentJob(): the failed event has BullMQ's data: the dead letter books, then ships", async () => {
      expect(await ship('adv75b-mutated-dead-letter', 'o-2', true)).toEqual({
        deadLetter: 'completed',
        bookings: 1,
        shipments: 1,
      });
    }, 60_000);
  },
);
