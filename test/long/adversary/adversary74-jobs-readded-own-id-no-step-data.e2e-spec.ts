/**
 * Adversary 74: a job with an id of the app's own, removed between its steps and added again
 * under that id, "is the same job: it takes its key over and goes on from the step the key
 * reached" (jobs.md) only where its key keeps the data of its last step. Where it keeps none
 * (its last step moved without new data: a poll; or it saved its next step after it moved,
 * in BullMQ's own docs' order), the job added again runs from its own first step: the first
 * step's effect done twice. Round 73 refused this for a job of a derived key
 * (`JobStepOwnerGoneError`), not for a job keyed by its own id, which never meets that check.
 *
 * The app: a processor keyed by its job id (the default; the app gives each payment's job the
 * id `pay-<order>`, as jobs.md's first bullet invites), on the pool seam, in BullMQ's step
 * idiom. Step `create` inserts the payment's row, saves its next step (`updateData`, then
 * `moveToDelayed(Date.now() + 1000)`, `DelayedError`). Step `poll` reads the settlement; not
 * there yet, it looks again a second later (`moveToDelayed`, `DelayedError`: nothing new to
 * save); there, it records the payout and returns. A second app does the same with BullMQ's
 * docs' order for `create` (https://docs.bullmq.io/patterns/process-step-jobs: `moveToDelayed`,
 * then `updateData`, then `throw new DelayedError()`). While the job waits between its steps,
 * it is removed (`job.remove()`: an operator, a `clean`, a `drain`) and added again under its id
 * (the client's retry, or the operator re-adding it).
 *
 * Why: lib/jobs/job-key.ts `stepOwnerOf` names the owner `id:<jobId>` for a job keyed by its
 * own id, so the job added again is the key's owner (`stepHold` undefined) and never reaches
 * `stepOwnerSeen`'s 'gone' branch nor its `JobStepOwnerGoneError`
 * (lib/jobs/idempotent-jobs.service.ts `runOnce`); `RELEASE_JOB_STEP`
 * (lib/claim/postgres-statements.ts) dropped the key's `bullmq:step-data` at a step without
 * data, so `dataToRestore` (lib/jobs/job-steps.ts) gives nothing back, and the job runs from
 * the data it was added with: `create` again.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "A job with an id of the app's own that
 * was removed between its steps and is added again under that id is the same job: it takes its
 * key over and goes on from the step the key reached, its data given back from there"; at
 * worst, as for a key of the app's, "fails for good saying so (`JobStepOwnerGoneError`)
 * rather than do the steps again". Never the first step twice.
 *
 * Control: removed and added again while it waits right after `create` saved before it moved:
 * it goes on from `poll`, `create` once.
 *
 * Severity: high (the payment created twice: the step's effect duplicated).
 *
 * Fails now: steps ['create', 'create', ...] in both (poll, docs' order); control passes.
 *
 * Suggested fix: keep the key's step data across a step without data (see adversary 74's
 * poll-step-drops-data); and where the key of a job of the app's own id keeps no step data
 * but has a committed step, and the job was added again (another `added`), fail it for good
 * as for a derived key (`JobStepOwnerGoneError`), rather than run its steps from its first.
 *
 * Fixed: the poll case by poll-step-drops-data's fix (the key keeps the step's data: the job
 * added again goes on from `poll`); the docs'-order case: each step leaves on its key the time
 * its job was added (`keptStepData`, `{ added }`), and a job of the app's own id whose key has
 * a step with no data and another `added` fails for good with JobStepOwnerGoneError
 * (`readdedWithoutStepData`, lib/jobs/job-steps.ts; `IdempotentJobs.runOnce`).
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
  step?: 'create' | 'poll';
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `docsOrder`: `create` saves its next step after it moved (BullMQ's docs' order). */
async function startApp(queue: string, docsOrder: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class Payments extends WorkerHost {
    @IdempotentJob()
    async process(job: Job<Order>, token?: string) {
      const { orderId } = job.data;
      if ((job.data.step ?? 'create') === 'create') {
        await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [orderId, 'create']);
        if (docsOrder) {
          await job.moveToDelayed(Date.now() + 1000, token);
          await job.updateData({ ...job.data, step: 'poll' });
        } else {
          await job.updateData({ ...job.data, step: 'poll' });
          await job.moveToDelayed(Date.now() + 1000, token);
        }
        throw new DelayedError();
      }
      const { rows } = await pool.query('SELECT 1 FROM settlements WHERE order_id = $1', [orderId]);
      if (rows.length === 0) {
        // Not settled yet: look again in a second (nothing new to save).
        await job.moveToDelayed(Date.now() + 1000, token);
        throw new DelayedError();
      }
      await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [orderId, 'paid']);
      return { paid: orderId };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Payments],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

/** Removed and added again once it has polled `polls` times (0: right after create). */
async function readded(queueName: string, orderId: string, polls: number, docsOrder: boolean) {
  const app = await startApp(queueName, docsOrder);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  const jobId = `pay-${orderId}`;
  try {
    await events.waitUntilReady();
    const first = await queue.add('payment', { orderId }, { jobId });
    for (let i = 0; i < 50 && (await first.getState()) !== 'delayed'; i++) await sleep(50);
    for (let run = 0; run < polls; run++) {
      const started = (await queue.getJob(jobId))!.attemptsStarted;
      for (let i = 0; i < 100; i++) {
        const now = (await queue.getJob(jobId))!;
        if (now.attemptsStarted > started && (await now.getState()) === 'delayed') break;
        await sleep(50);
      }
    }
    await first.remove();
    const again = await queue.add('payment', { orderId }, { jobId });
    await sleep(500);
    // The PSP settles the payment.
    await pool.query('INSERT INTO settlements (order_id) VALUES ($1)', [orderId]);
    const settled = await again.waitUntilFinished(events, 30_000).then(
      (value: unknown) => ({ state: 'completed', value }),
      (error: Error) => ({ state: 'failed', reason: error.message }),
    );
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM steps WHERE order_id = $1 ORDER BY id',
      [orderId],
    );
    return { settled, steps: rows.map((row) => row.step) };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 74: a job of its own id added again, its key keeping no step data', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv74_readded_own_id');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      `CREATE TABLE steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL);
       CREATE TABLE settlements (order_id text PRIMARY KEY)`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: added again right after create: goes on from poll, create once', async () => {
    const result = await readded('own-id-control', 'o-1', 0, false);
    expect(result.settled).toEqual({ state: 'completed', value: { paid: 'o-1' } });
    expect(result.steps).toEqual(['create', 'paid']);
  }, 60_000);

  it('added again after a poll: never create twice', async () => {
    const result = await readded('own-id-poll', 'o-2', 1, false);
    expect(result.steps.filter((step) => step === 'create')).toEqual(['create']);
  }, 60_000);

  it("added again after create in BullMQ's docs' order: never create twice", async () => {
    const result = await readded('own-id-docs-order', 'o-3', 0, true);
    expect(result.steps.filter((step) => step === 'create')).toEqual(['create']);
  }, 60_000);
});
