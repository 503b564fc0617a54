/**
 * Adversary 61: BullMQ's step idiom run through several steps in one run, its delayed step
 * written as BullMQ documents it (`moveToDelayed`, THEN `updateData`, then `DelayedError`):
 * the job's next run "restores" the data of the step before over the newer data BullMQ
 * rightly has, and the delayed step's work is done twice.
 *
 * The app: an `@IdempotentJob()` processor running BullMQ's "Process Step Jobs" pattern
 * (https://docs.bullmq.io/patterns/process-step-jobs): a `while (step !== finish)` loop whose
 * steps each do their work and save the next step in the job's data. Step `initial` inserts a
 * row and saves `second` (`job.updateData`), goes on in the same run; step `second` inserts a
 * row, then, as the page's "Delaying" section writes it, `await job.moveToDelayed(ts, token)`,
 * `await job.updateData({ step: 'third' })`, `throw new DelayedError()`; step `third` inserts
 * a row and completes.
 *
 * What happens (lib/jobs/job-steps.ts, lib/jobs/idempotent-jobs.service.ts):
 *  1. `initial`'s `updateData({ step: 'second' })` comes while work is pending: held
 *     (`stepJob`'s `updateData`: `held = { data }`).
 *  2. `second`'s `moveToDelayed` commits the step with the held data (`commitStep(held)` ->
 *     `RELEASE_JOB_STEP` v3 keeps `bullmq:step-data = { data: { step: 'second' } }` on the
 *     key), flushes it, moves.
 *  3. `updateData({ step: 'third' })` after the move: nothing pending (the transaction ended
 *     with the step), so it goes straight to BullMQ: BullMQ has `third`, correctly. The key
 *     still keeps `second` as the step's data: nothing replaces or clears it.
 *  4. The next run: `dataToRestore` (job-steps.ts) restores whenever the kept data differs from
 *     BullMQ's (`same(kept.data) ? undefined : { data: kept.data }`): `second` != `third`, so
 *     `runOnce` writes `{ step: 'second' }` back to BullMQ (`job.updateData?.(restore.data)`)
 *     and the job runs `second` again: its row is inserted twice (the step commits again when
 *     it moves again, without held data, which clears the kept data; then `third`).
 *  The restore cannot tell "BullMQ lost the step's data" (its worker died before the flush)
 *  from "BullMQ has newer data than the step's" (written after the step committed).
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "a worker that dies after the step
 * committed, before BullMQ had the data, leaves it there, and the job's next run gives it
 * back to BullMQ before it runs, so that the step is not done twice." — and for a job that
 * moves itself, "the same as without the library: what it did so far commits, its key stays
 * unfinished and named the job's, and its next run goes on". No worker died here; without
 * the library the job runs `initial`, `second`, `third` once each.
 *
 * Control: the same processor saving `third` BEFORE it moves (`updateData` then
 * `moveToDelayed`: held, committed with the step): `initial`, `second`, `third` once each.
 *
 * Severity: critical (a committed step's database work done twice, with BullMQ's own
 * documented idiom, no crash needed: the 'exactly once' promise broken by the restore meant
 * to keep it).
 *
 * Fixed: a step keeps the JSON BullMQ had before it (`over`), and its data is given back
 * only where BullMQ still has that (`dataToRestore`): data written since stands.
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

type Step = 'initial' | 'second' | 'third' | 'finish';

interface Order {
  orderId: string;
  step: Step;
}

/** Where the delayed step saves its next step: after its move (BullMQ's page), or before. */
type SaveAt = 'after-move' | 'before-move';

async function insert(job: Job<Order>, step: Step): Promise<void> {
  await pool.query('INSERT INTO order_steps (order_id, step) VALUES ($1, $2)', [
    job.data.orderId,
    step,
  ]);
}

/** BullMQ's "Process Step Jobs" loop, its second step delayed as the page's "Delaying". */
async function steps(job: Job<Order>, token: string | undefined, saveAt: SaveAt) {
  let step = job.data.step;
  while (step !== 'finish') {
    switch (step) {
      case 'initial': {
        await insert(job, 'initial');
        await job.updateData({ ...job.data, step: 'second' });
        step = 'second';
        break;
      }
      case 'second': {
        await insert(job, 'second');
        if (saveAt === 'before-move') await job.updateData({ ...job.data, step: 'third' });
        await job.moveToDelayed(Date.now() + 200, token);
        if (saveAt === 'after-move') await job.updateData({ ...job.data, step: 'third' });
        throw new DelayedError();
      }
      case 'third': {
        await insert(job, 'third');
        await job.updateData({ ...job.data, step: 'finish' });
        step = 'finish';
        break;
      }
      default:
        throw new Error(`invalid step ${String(step)}`);
    }
  }
  return { done: job.data.orderId };
}

async function startApp(queue: string, saveAt: SaveAt): Promise<INestApplicationContext> {
  @Processor(queue)
  class Orders extends WorkerHost {
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
    providers: [Orders],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
}

async function runJob(queueName: string, saveAt: SaveAt) {
  const app = await startApp(queueName, saveAt);
  const connection = { port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add('order', { orderId: queueName, step: 'initial' });
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

onRedis('adversary 61: a step saved after moveToDelayed, with a held step before it', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv61_restore_after_move');
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

  it('control: the next step saved before the move, each step once', async () => {
    expect(await runJob('before-move', 'before-move')).toEqual({
      outcome: { completed: { done: 'before-move' } },
      steps: ['initial', 'second', 'third'],
    });
  }, 60_000);

  it("saved after the move (BullMQ's page), the delayed step is not done twice", async () => {
    // Fails: steps ['initial', 'second', 'second', 'third']: the next run restored
    // { step: 'second' } (the step's kept data) over BullMQ's newer { step: 'third' }.
    expect(await runJob('after-move', 'after-move')).toEqual({
      outcome: { completed: { done: 'after-move' } },
      steps: ['initial', 'second', 'third'],
    });
  }, 60_000);
});
