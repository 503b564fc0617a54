/**
 * What the app does: BullMQ's own "process step jobs" idiom (docs.bullmq.io, patterns/process-
 * step-jobs) in an `@IdempotentJob()` processor. Its first step reserves the order's stock (a
 * row, in the job's transaction), moves the job to the delayed set with its lock token
 * (`job.moveToDelayed(ts, token)`), records in the job's data that the next step is due
 * (`job.updateData`) and throws BullMQ's `DelayedError`; the job comes back, runs its second
 * step (ships: another row) and completes.
 *
 * What happens: the job completes and only the second step's row exists: the first step's
 * reservation was rolled back, never run again. `DelayedError` is taken for the job's own
 * failure (lib/jobs/idempotent-jobs.service.ts:221-223: `rollBackAndRelease(..., 'job_failed')`,
 * then lib/jobs/job-failure.ts:42 `throw`), so the step's work is thrown away while the job's
 * progress, kept in Redis, says it was done. The job is told done while its first step's work
 * never committed.
 *
 * Expected (docs/guides/jobs.md): "one whose work did not commit runs again", and a job that
 * throws gets "its own error, as without the library" (without it, the step's row stays: the
 * error only says the job was moved). Either the work done before `DelayedError` commits, or
 * the job runs it again; not "done" with half of its work.
 *
 * Control: the same processor without `@IdempotentJob()` (both rows), and the decorated one
 * whose job has no first step (one row, completed).
 *
 * Severity: high (a job told done while part of its work is lost).
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { DelayedError, type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import {
  redisServerInstalled,
  startTestRedis,
  type TestRedis,
} from '../../support/redis-server.js';

const onRedis = redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;

interface Order {
  orderId: string;
  step: 'reserve' | 'ship';
}

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

async function step(job: Job<Order>, token: string | undefined): Promise<unknown> {
  if (job.data.step === 'reserve') {
    await pool.query('INSERT INTO order_steps (order_id, step) VALUES ($1, $2)', [
      job.data.orderId,
      'reserve',
    ]);
    // BullMQ's idiom: move the job, note its next step, say so.
    await job.moveToDelayed(Date.now() + 300, token);
    await job.updateData({ ...job.data, step: 'ship' });
    throw new DelayedError();
  }
  await pool.query('INSERT INTO order_steps (order_id, step) VALUES ($1, $2)', [
    job.data.orderId,
    'ship',
  ]);
  return { shipped: job.data.orderId };
}

async function startApp(queue: string, idempotent: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class Plain extends WorkerHost {
    process(job: Job<Order>, token?: string) {
      return step(job, token);
    }
  }
  @Processor(queue)
  class Decorated extends WorkerHost {
    @IdempotentJob()
    process(job: Job<Order>, token?: string) {
      return step(job, token);
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
  return NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
}

async function runJob(queueName: string, idempotent: boolean, data: Order) {
  const app = await startApp(queueName, idempotent);
  const queue = new Queue(queueName, { connection: { port: redis.port } });
  const events = new QueueEvents(queueName, { connection: { port: redis.port } });
  try {
    await events.waitUntilReady();
    const job = await queue.add('order', data);
    const value = await job.waitUntilFinished(events, 20_000);
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM order_steps WHERE order_id = $1 ORDER BY id',
      [data.orderId],
    );
    return { value: value as unknown, steps: rows.map((row) => row.step) };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 54: a step job that moves itself to the delayed set', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv54_delayed_step');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE order_steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the library both steps are done', async () => {
    const outcome = await runJob('plain-steps', false, { orderId: 'o-plain', step: 'reserve' });
    expect(outcome).toEqual({ value: { shipped: 'o-plain' }, steps: ['reserve', 'ship'] });
  }, 60_000);

  it('control: a job of one step completes with its row, with the library', async () => {
    const outcome = await runJob('one-step', true, { orderId: 'o-one', step: 'ship' });
    expect(outcome).toEqual({ value: { shipped: 'o-one' }, steps: ['ship'] });
  }, 60_000);

  it('with @IdempotentJob(), the job is not done until both steps are', async () => {
    const outcome = await runJob('idem-steps', true, { orderId: 'o-idem', step: 'reserve' });
    // Fails: { value: { shipped: 'o-idem' }, steps: ['ship'] }, the reservation lost.
    expect(outcome).toEqual({ value: { shipped: 'o-idem' }, steps: ['reserve', 'ship'] });
  }, 60_000);
});
