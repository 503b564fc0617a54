/**
 * Adversary 61: a step job whose data holds a NUL character (`\u0000`, valid JSON, kept by
 * BullMQ as any string) can no longer take a step: the step's held data is now committed
 * with it as `jsonb`, which PostgreSQL refuses for `\u0000`; every attempt's step rolls back
 * and the job fails for good with the database's words about a statement the app never ran.
 *
 * The app: an `@IdempotentJob()` processor running BullMQ's step idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs): step `reserve` inserts a row, saves its
 * next step (`job.updateData({ ...data, step: 'ship' })`), moves itself
 * (`job.moveToDelayed(ts, token)`) and throws `DelayedError`; step `ship` inserts a row and
 * completes. The order's data carries the customer's free-text `note`, here with a NUL in it
 * (`'gift\u0000wrap'`: pasted from a form; JSON writes it `"\u0000"`). The job has
 * `attempts: 3`.
 *
 * What happens: since e8f705f the step's held data commits with the step, on its key
 * (`stepStatement`, lib/jobs/idempotent-jobs.service.ts: `JSON.stringify(held)` as `$8`;
 * `RELEASE_JOB_STEP` v3, lib/claim/postgres-statements.ts: `$8::jsonb`). PostgreSQL's jsonb
 * refuses `\u0000` ("unsupported Unicode escape sequence", 22P05): the step cannot commit, so
 * `moveToDelayed` throws (stepJob's `await commit()` before the move), the job's work rolls
 * back, and the error is the job's own (`afterJobError`: 22P05 is neither transient nor a
 * connection error): BullMQ's attempts run `reserve` again, meet the same, and the job ends
 * in the failed set, "unsupported Unicode escape sequence", having never done a thing wrong.
 * Before e8f705f (v2, no data kept), and without the library, the job completes.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): a job that "moves itself and throws
 * BullMQ's `DelayedError`" sees "the same as without the library: what it did so far commits,
 * its key stays unfinished and named the job's, and its next run goes on". The row "moves
 * itself, but its step cannot commit (a constraint checked at COMMIT, the database gone)"
 * names the job's faults and outages, not the library's own encoding of the job's data.
 *
 * The same for a lone UTF-16 surrogate, which JSON writes as `\udXXX` and jsonb refuses too
 * ("Unicode low surrogate must follow a high surrogate"): a note cut to a length by
 * `.slice()` in the middle of an emoji, the commonest way such a string is made.
 *
 * Controls: the same job without `@IdempotentJob()` (completes, both rows); with it, the same
 * note without the NUL (completes, both rows).
 *
 * Severity: medium (data-dependent; a job that runs without the library fails for good after
 * its attempts, each redoing its step, with a misleading reason; a regression of e8f705f).
 *
 * Fixed: a step's data is kept as its JSON in base64 (`keptStepData`), which jsonb takes
 * whatever the JSON holds.
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
  note: string;
  step: 'reserve' | 'ship';
}

async function steps(job: Job<Order>, token: string | undefined) {
  await pool.query('INSERT INTO order_steps (order_id, step) VALUES ($1, $2)', [
    job.data.orderId,
    job.data.step,
  ]);
  if (job.data.step === 'reserve') {
    await job.updateData({ ...job.data, step: 'ship' });
    await job.moveToDelayed(Date.now() + 200, token);
    throw new DelayedError();
  }
  return { shipped: job.data.orderId };
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

async function runJob(queueName: string, idempotent: boolean, note: string) {
  const app = await startApp(queueName, idempotent);
  const connection = { port: redis.port };
  const queue = new Queue<Order>(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add(
      'order',
      { orderId: queueName, note, step: 'reserve' },
      { attempts: 3, backoff: { type: 'fixed', delay: 50 } },
    );
    const outcome = await job.waitUntilFinished(events, 20_000).then(
      (value: unknown) => ({ completed: value }),
      (error: Error) => ({ failed: error.message }),
    );
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM order_steps WHERE order_id = $1 ORDER BY id',
      [queueName],
    );
    return { outcome, steps: rows.map((row) => row.step) };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

const done = (orderId: string) => ({
  outcome: { completed: { shipped: orderId } },
  steps: ['reserve', 'ship'],
});

onRedis('adversary 61: a step job whose data holds a NUL character', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv61_step_data_nul');
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

  it('control: without the library, the NUL in its note changes nothing', async () => {
    expect(await runJob('plain', false, 'gift\u0000wrap')).toEqual(done('plain'));
  }, 60_000);

  it('control: with it, a note without a NUL, both steps', async () => {
    expect(await runJob('clean', true, 'gift wrap')).toEqual(done('clean'));
  }, 60_000);

  it('with it, a note with a NUL: the step commits and the job goes on', async () => {
    // Fails: { failed: 'unsupported Unicode escape sequence' }, steps [] (three attempts,
    // each step rolled back).
    expect(await runJob('nul', true, 'gift\u0000wrap')).toEqual(done('nul'));
  }, 60_000);

  it('with it, a note cut in the middle of an emoji: the step commits too', async () => {
    // Fails: { failed: 'invalid input syntax for type json' }, steps []: a lone surrogate
    // (`'gift 🎁'.slice(0, 6)`, JSON `"gift \ud83c"`) is refused by jsonb as the NUL is.
    expect(await runJob('surrogate', true, 'gift 🎁'.slice(0, 6))).toEqual(done('surrogate'));
  }, 60_000);
});
