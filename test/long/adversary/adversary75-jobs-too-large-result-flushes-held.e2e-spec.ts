/**
 * Adversary 75: a job whose result is over `maxResponseBytes` has its work rolled back and is
 * failed for good, as jobs.md says; but the data it gave `job.updateData()` and the progress it
 * gave `job.updateProgress()` during that run, held "until the job's work commits", are then
 * written to BullMQ all the same: BullMQ's job says "booked" (its data's next step, its
 * progress 100) while the booking's row was rolled back.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam (`maxResponseBytes: 1024`):
 *
 *   await pool.query('INSERT INTO bookings (order_id) VALUES ($1)', [orderId]);
 *   await job.updateData({ ...job.data, step: 'booked' });   // BullMQ's step idiom
 *   await job.updateProgress(100);
 *   return { orderId, manifest: 'x'.repeat(job.data.manifestBytes) };  // a large manifest
 *
 * Why: lib/jobs/idempotent-jobs.service.ts `runStepped`: a result over `maxResponseBytes` is
 * stored as the library's refusal (`commitAnswer(..., tooLarge, true)`: the work rolled back,
 * the refusal stored alone), and then `if (stored === answer || stored === tooLarge) { await
 * stepped.flush(); ... }` writes the held data and progress (lib/jobs/job-steps.ts `flush`) as
 * if the work had committed. The job's record in BullMQ then says a step was done whose work
 * is gone (its data's `step`, its progress): what an operator or a board reads of the failed
 * job, and what a job re-added from that data (a fix's usual way) goes on from.
 *
 * Expected (docs/guides/jobs.md): "`job.updateData()` during the job's run, until its work
 * committed, is held: ... BullMQ gets it once that work committed (its step, or its result),
 * or never, if it rolled back. So BullMQ's step idiom ... never skips a step whose work a
 * failure rolled back"; "`job.updateProgress()` is held the same way: ... or never, if it
 * rolled back"; "A result over `maxResponseBytes` fails the job for good, its work rolled back."
 *
 * Control: the same job with a small result: completed, its row in, BullMQ's data and progress
 * the held ones.
 *
 * Severity: low (the job is failed for good and its key keeps the refusal, so the library runs
 * nothing of it again; but BullMQ's record of it says a rolled-back step was done).
 *
 * Fails now: the failed job's data is { step: 'booked', ... } and its progress 100 with no
 * booking row (expected its data and progress of before the run).
 *
 * Suggested fix: flush only where the work committed (`stored === answer`); where the library's
 * refusal was stored in its place (`tooLarge`), drop the held data and progress.
 *
 * Fixed: lib/jobs/idempotent-jobs.service.ts `runStepped` writes the held data and progress
 * (`stepped.flush()`) only where the job's answer was stored (`stored === answer`); where the
 * library's refusal was kept in its place (`tooLarge`) its work rolled back, nothing held is
 * written, and `release()` (lib/jobs/job-steps.ts `stepJob`) gives the job object back
 * BullMQ's data and progress.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

interface Booking {
  orderId: string;
  manifestBytes: number;
  step?: string;
}

async function startApp(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
  class Bookings extends WorkerHost {
    @IdempotentJob()
    async process(job: Job<Booking>) {
      const { orderId } = job.data;
      if (job.data.step !== 'booked') {
        await pool.query('INSERT INTO bookings (order_id) VALUES ($1)', [orderId]);
        await job.updateData({ ...job.data, step: 'booked' });
      }
      await job.updateProgress(100);
      return { orderId, manifest: 'x'.repeat(job.data.manifestBytes) };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool, maxResponseBytes: 1024 }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Bookings],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

async function book(queueName: string, data: Booking) {
  const app = await startApp(queueName);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add('book', data);
    const settled = await job.waitUntilFinished(events, 30_000).then(
      () => 'completed',
      () => 'failed',
    );
    const after = await Job.fromId(queue, job.id!);
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM bookings WHERE order_id = $1',
      [data.orderId],
    );
    return { settled, rows: rows[0].n, data: after?.data, progress: after?.progress };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 75: a result too large, its held data and progress written anyway', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv75_jobs_too_large');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE bookings (id serial PRIMARY KEY, order_id text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: a small result: completed, booked, its data and progress written', async () => {
    const result = await book('adv75-too-large-control', { orderId: 'o-1', manifestBytes: 10 });
    expect(result).toEqual({
      settled: 'completed',
      rows: 1,
      data: { orderId: 'o-1', manifestBytes: 10, step: 'booked' },
      progress: 100,
    });
  }, 60_000);

  it('a result too large: failed, rolled back, BullMQ keeps its data and progress of before', async () => {
    const result = await book('adv75-too-large', { orderId: 'o-2', manifestBytes: 4096 });
    expect(result).toEqual({
      settled: 'failed',
      rows: 0,
      data: { orderId: 'o-2', manifestBytes: 4096 },
      progress: 0,
    });
  }, 60_000);
});
