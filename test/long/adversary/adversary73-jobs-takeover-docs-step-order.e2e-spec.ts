/**
 * Adversary 73: round 72's take-over of a key held by a job BullMQ no longer has goes on "from
 * the step its key reached, with the data that step left": but a step job written as BullMQ's
 * own docs write it (https://docs.bullmq.io/patterns/process-step-jobs, "Delaying":
 * `await job.moveToDelayed(Date.now() + 200, token); await job.updateData({ step: Step.Second
 * }); throw new DelayedError();`, the data saved AFTER the move) leaves no data with its step,
 * and the job that takes its key over starts from its own first step: `reserve` done twice.
 *
 * The app: a processor keyed by its order (`key`, `fingerprint` the order, as jobs.md says for
 * a step job); step `reserve` inserts its row, then, in BullMQ's docs' order,
 * `job.moveToDelayed(Date.now() + 3000, token)`, `job.updateData({ ...data, step: 'ship' })`,
 * `throw new DelayedError()`; step `ship` inserts its row and returns. The order is added
 * again (a client's retry) while its first job waits for `ship`; the first job is then
 * removed (`job.remove()`, as an operator, `clean`, `drain` or a dedup `replace` does).
 *
 * Why: lib/jobs/job-steps.ts `stepJob`: `moveToDelayed` commits the step with the data held
 * THEN (none: the update comes after), and `RELEASE_JOB_STEP`
 * (lib/claim/postgres-statements.ts) drops the key's `bullmq:step-data` for a step without
 * data; the `updateData` after the move is not pending, written to BullMQ only (the removed
 * job's). `runOnce` (lib/jobs/idempotent-jobs.service.ts) then finds the owner gone
 * (`stepOwnerSeen`), takes the key over as that job's, and `dataToRestore` has nothing to give
 * back: the second job runs with its own data, `reserve` again.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "where BullMQ no longer has the job
 * (removed, drained, or replaced by its deduplication between its steps), the other job takes
 * its steps over and goes on from the step its key reached, with the data that step left" —
 * here it did the first step again; or, where the key has no step data to go on with, it should
 * not run the steps from the start (wait, or fail saying so), not `reserve` twice.
 *
 * Control: the same with the data saved before the move (`updateData`, then `moveToDelayed`):
 * the second job goes on with `ship`, `reserve` once.
 *
 * Severity: high (a step's effect done twice, by the idiom BullMQ documents for step jobs, on
 * the path round 72 added to make it "reserve once, ship once").
 *
 * Fails now: { reserves: 2, ships: 1 }, the second job completed; control passes.
 *
 * Fixed: where the gone owner's key keeps no step data, the job that meets it fails for good
 * with JobStepOwnerGoneError, saying what to do (lib/jobs/idempotent-jobs.service.ts), rather
 * than run its steps from its first; the test asks that (it asked the ship).
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
  step?: 'reserve' | 'ship';
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function startApp(queue: string, dataAfterMove: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class Orders extends WorkerHost {
    @IdempotentJob({
      key: (job) => (job.data as Order).orderId,
      fingerprint: (job) => ({ orderId: (job.data as Order).orderId }),
    })
    async process(job: Job<Order>, token?: string) {
      const step = job.data.step ?? 'reserve';
      await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
        job.data.orderId,
        step,
      ]);
      if (step === 'reserve') {
        if (dataAfterMove) {
          // BullMQ's docs' order.
          await job.moveToDelayed(Date.now() + 3000, token);
          await job.updateData({ ...job.data, step: 'ship' });
        } else {
          await job.updateData({ ...job.data, step: 'ship' });
          await job.moveToDelayed(Date.now() + 3000, token);
        }
        throw new DelayedError();
      }
      return { shipped: job.data.orderId };
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

async function orderRetried(queueName: string, orderId: string, dataAfterMove: boolean) {
  const app = await startApp(queueName, dataAfterMove);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const first = await queue.add('order', { orderId });
    for (let i = 0; i < 50 && (await first.getState()) !== 'delayed'; i++) await sleep(100);
    const second = await queue.add('order', { orderId });
    // The second met the key held and waits; the first job is removed between its steps.
    for (let i = 0; i < 50 && (await second.getState()) !== 'delayed'; i++) await sleep(100);
    await first.remove();
    const settled = await second.waitUntilFinished(events, 20_000).then(
      (value: unknown) => ({ state: 'completed', value }),
      (error: Error) => ({ state: 'failed', reason: error.message }),
    );
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM steps WHERE order_id = $1',
      [orderId],
    );
    return {
      second: settled,
      reserves: rows.filter((row) => row.step === 'reserve').length,
      ships: rows.filter((row) => row.step === 'ship').length,
    };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 73: a gone owner that saved its step data after its move', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv73_takeover_order');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE steps (order_id text NOT NULL, step text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: data saved before the move: the second job goes on with ship, reserve once', async () => {
    const result = await orderRetried('data-first', 'o-1', false);
    expect(result).toEqual({
      second: { state: 'completed', value: { shipped: 'o-1' } },
      reserves: 1,
      ships: 1,
    });
  }, 60_000);

  it("BullMQ's docs' order (move, then data): reserve still once", async () => {
    const result = await orderRetried('docs-order', 'o-2', true);
    // The key keeps no data of the step (saved after the move): the job fails, saying so,
    // rather than reserve again (the header's "or fail saying so").
    expect(result).toEqual({
      second: { state: 'failed', reason: expect.stringMatching(/is gone from its queue/) },
      reserves: 1,
      ships: 0,
    });
  }, 60_000);
});
