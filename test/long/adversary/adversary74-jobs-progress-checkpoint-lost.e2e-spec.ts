/**
 * Adversary 74: a job that checkpoints its steps with BullMQ's `job.updateProgress()` (as many
 * do: progress is what a board shows, and what the job reads back on its retry to skip what it
 * did) loses a step's effect: the library rolls the step's work back with the job's error, but
 * the progress that says "done" was written to BullMQ at once, so the retry skips the step
 * whose work is gone. Without the library the step's row stood (written as it went), and the
 * retry rightly skipped it; `updateData` is held for this very reason, `updateProgress` is not.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam, `attempts: 2`. Step 1 reserves the
 * stock (a row), then `job.updateProgress(50)`; step 2 books the carrier (a row) and, on the
 * first attempt, the carrier is down (it throws). Each step runs only if the job's progress
 * says it was not done (`job.progress < 50`). BullMQ retries the job.
 *
 * Why: lib/jobs/job-steps.ts `stepJob` holds `updateData` (and the moves) while the job's work
 * is uncommitted, not `updateProgress`, which BullMQ writes at once; lib/jobs/idempotent-jobs
 * .service.ts `runStepped` rolls the job's whole work back on its error
 * (`rollBackAndRelease(..., 'job_failed')`).
 *
 * Expected (docs/guides/jobs.md): "throws | its own error, as without the library (attempts,
 * backoff, the failed set)", and the job's effects exactly once: the stock reserved once, the
 * carrier booked once. Jobs.md says the data is held so that "BullMQ's step idiom ... never skips
 * a step whose work a failure rolled back", and says nothing of progress: a job that saves its
 * step as progress has it skipped.
 *
 * Control: the same job without the carrier's failure: reserved once, booked once.
 *
 * Severity: high (an effect lost: the stock never reserved, the job completed).
 *
 * Fails now: completed { booked: 'o-2' } with steps ['book'] only (the reservation rolled back
 * with attempt 1, skipped by attempt 2 by its progress); control passes.
 *
 * Suggested fix: hold `updateProgress` as `updateData` is (BullMQ gets it once the work
 * committed), or say in jobs.md that progress is written at once and must not checkpoint steps.
 *
 * Fixed: `updateProgress()` is held as `updateData()` is (`stepJob`, lib/jobs/job-steps.ts): the
 * job reads `job.progress` at once, BullMQ gets its last value (and its `progress` event) once
 * the work committed, never if it rolled back; jobs.md says so, and that progress is not kept
 * on the key (save steps in data). The test is unchanged.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
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
  carrierDownOnce: boolean;
}

async function startApp(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
  class Orders extends WorkerHost {
    @IdempotentJob()
    async process(job: Job<Order>) {
      const { orderId } = job.data;
      const done = typeof job.progress === 'number' ? job.progress : 0;
      if (done < 50) {
        await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
          orderId,
          'reserve',
        ]);
        await job.updateProgress(50);
      }
      await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [orderId, 'book']);
      if (job.data.carrierDownOnce && job.attemptsMade === 0) {
        throw new Error('the carrier is down (attempt 1)');
      }
      await job.updateProgress(100);
      return { booked: orderId };
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

async function order(queueName: string, data: Order) {
  const app = await startApp(queueName);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add('order', data, { attempts: 2 });
    const settled = await job.waitUntilFinished(events, 30_000).then(
      (value: unknown) => ({ state: 'completed', value }),
      (error: Error) => ({ state: 'failed', reason: error.message }),
    );
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM steps WHERE order_id = $1 ORDER BY id',
      [data.orderId],
    );
    return { settled, steps: rows.map((row) => row.step) };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 74: a step checkpointed as progress, its work rolled back', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv74_progress_checkpoint');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: no failure: reserved once, booked once', async () => {
    const result = await order('progress-control', { orderId: 'o-1', carrierDownOnce: false });
    expect(result).toEqual({
      settled: { state: 'completed', value: { booked: 'o-1' } },
      steps: ['reserve', 'book'],
    });
  }, 60_000);

  it('the carrier down once: after the retry, reserved once and booked once', async () => {
    const result = await order('progress-retried', { orderId: 'o-2', carrierDownOnce: true });
    expect(result).toEqual({
      settled: { state: 'completed', value: { booked: 'o-2' } },
      steps: ['reserve', 'book'],
    });
  }, 60_000);
});
