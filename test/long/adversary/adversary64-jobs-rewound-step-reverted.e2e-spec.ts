/**
 * Adversary 64: an operator's fix that rewinds a failed step job to the step before (its data
 * set back to what it was before that step, then `job.retry()`) is written over by the
 * library: the job's next run gives BullMQ the kept data of the step it was rewound from, and
 * the job fails again, however often it is rewound — its data in Redis rewritten each time.
 *
 * The app: an `@IdempotentJob()` processor running BullMQ's step idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs): step `reserve` inserts a reservation
 * (valid or not, as `settings.valid` says), saves its next step
 * (`job.updateData({ ...data, step: 'pay' })`, held), moves itself (`moveToDelayed`) and
 * throws `DelayedError`; step `pay` pays against the order's latest reservation, and throws
 * 'reservation expired' where it is not valid (the job's own error; attempts: 1). The first
 * reservation is not valid: `pay` fails, the job fails. The operator fixes the fault
 * (`settings.valid = true`) and rewinds the job to `reserve`, so that a new reservation is
 * made: `(await queue.getJob(id)).updateData({ ...data, step: 'reserve' })`, then
 * `job.retry()` (what a board's "edit data" then "retry" does).
 *
 * What happens: `reserve`'s step committed with `bullmq:step-data = { data: <step pay>,
 * over: <step reserve> }` (`keptStepData`, lib/jobs/job-steps.ts), and nothing clears it
 * while the key is the job's (the flush succeeded; `pay` failed, rolled back). The rewound
 * data is, to the byte, the step's `over`: `dataToRestore` takes that for "BullMQ still has
 * what it had before the step" (its worker died before the data was written) and `runOnce`
 * (lib/jobs/idempotent-jobs.service.ts) writes `step: 'pay'` back to BullMQ before the work.
 * `pay` meets the expired reservation again and fails: the operator's rewind is reverted in
 * Redis, silently, and the job is stuck in the failed set (its key, unfinished and its own,
 * holds back every other job of its key). `over` tells BullMQ's data at the step from data
 * that happens to be equal to it, written since: an A-B-A.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): the step's data is given back "Only
 * where BullMQ still has the data of before the step: data written since (... an operator's
 * fix before `job.retry()`) stands"; "Limits": "Fix the fault and retry the failed job ...".
 *
 * Controls: the same rewind and retry without `@IdempotentJob()` (completes: reserved twice,
 * paid); and with it, a rewind whose data differs from `over` by one member
 * (`rewound: 1`) — completes: only the data equal to `over` is reverted.
 *
 * Severity: high (a failed job's documented remedy undone and its data rewritten, for good;
 * the same outcome adversary 61 fixed for a fix that is not a rewind).
 *
 * Fixed: once BullMQ has a step's data the key notes it (`written`, MARK_JOB_STEP_DATA_WRITTEN),
 * and the same job's data is never given back after that (`dataToRestore`).
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
  rewound?: number;
}

async function steps(job: Job<Order>, token: string | undefined) {
  const { orderId } = job.data;
  if (job.data.step === 'reserve') {
    await pool.query(
      `INSERT INTO reservations (order_id, valid) SELECT $1, valid FROM settings WHERE order_id = $1`,
      [orderId],
    );
    await job.updateData({ ...job.data, step: 'pay' });
    await job.moveToDelayed(Date.now() + 200, token);
    throw new DelayedError();
  }
  const { rows } = await pool.query<{ valid: boolean }>(
    'SELECT valid FROM reservations WHERE order_id = $1 ORDER BY id DESC LIMIT 1',
    [orderId],
  );
  if (!rows[0]?.valid) throw new Error('reservation expired');
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

const settled = (job: Job, events: QueueEvents) =>
  job.waitUntilFinished(events, 20_000).then(
    (value: unknown) => ({ completed: value }),
    (error: Error) => ({ failed: error.message }),
  );

/** Adds the order, waits for it to fail, fixes the fault, rewinds the job and retries it. */
async function rewindAndRetry(queueName: string, idempotent: boolean, mark?: number) {
  await pool.query('INSERT INTO settings (order_id, valid) VALUES ($1, false)', [queueName]);
  const app = await startApp(queueName, idempotent);
  const connection = { port: redis.port };
  const queue = new Queue<Order>(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const added = await queue.add('order', { orderId: queueName, step: 'reserve' });
    const first = await settled(added, events);
    // The operator's fix: the fault fixed, the job rewound to the step before, retried.
    await pool.query('UPDATE settings SET valid = true WHERE order_id = $1', [queueName]);
    const failed = (await queue.getJob(added.id!))!;
    const rewound: Order = { orderId: queueName, step: 'reserve' };
    if (mark !== undefined) rewound.rewound = mark;
    await failed.updateData(rewound);
    await failed.retry();
    const second = await settled(failed, events);
    const data = (await queue.getJob(added.id!))!.data;
    const reservations = await pool.query<{ valid: boolean }>(
      'SELECT valid FROM reservations WHERE order_id = $1 ORDER BY id',
      [queueName],
    );
    const payments = await pool.query('SELECT 1 FROM payments WHERE order_id = $1', [queueName]);
    return {
      first,
      second,
      step: data.step,
      reservations: reservations.rows.map((row) => row.valid),
      payments: payments.rowCount,
    };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

const fixed = (orderId: string) => ({
  first: { failed: 'reservation expired' },
  second: { completed: { paid: orderId } },
  step: 'pay',
  reservations: [false, true],
  payments: 1,
});

onRedis('adversary 64: a failed step job rewound to the step before, then retried', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv64_rewound_step');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      `CREATE TABLE settings (order_id text PRIMARY KEY, valid boolean NOT NULL);
       CREATE TABLE reservations (id serial PRIMARY KEY, order_id text NOT NULL,
         valid boolean NOT NULL);
       CREATE TABLE payments (id serial PRIMARY KEY, order_id text NOT NULL)`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the library, the rewound job reserves again and pays', async () => {
    expect(await rewindAndRetry('plain', false)).toEqual(fixed('plain'));
  }, 60_000);

  it('control: with it, a rewind that differs from the data before the step stands', async () => {
    expect(await rewindAndRetry('marked', true, 1)).toEqual(fixed('marked'));
  }, 60_000);

  it('with it, a rewind to exactly the data before the step stands', async () => {
    // Fails: second { failed: 'reservation expired' }, reservations [false] (the step
    // `reserve` never ran again: BullMQ was given `step: 'pay'` back over the rewind).
    expect(await rewindAndRetry('rewound', true)).toEqual(fixed('rewound'));
  }, 60_000);
});
