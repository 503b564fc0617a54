/**
 * Adversary 73: a held `updateData()` is JSON-checked at the call (round 72's fix) but written
 * later from the same live object: a job that goes on to change the object it saved (it keeps
 * using `job.data`, which the library sets to that object) after the call gets what BullMQ
 * cannot write (a BigInt, a cycle) into it after the check, and is failed AFTER its work
 * committed, as in adversary 72: row in, key done, failed by an error its code never saw.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam inserts its payout row, saves the
 * payout's id as text (`job.updateData({ ...job.data, paymentId })`, in a try/catch), then keeps
 * the payment it read on `job.data` for its own later use (`job.data.payment = payment`, a
 * Prisma row whose `id` is a BigInt) and returns. Without the library BullMQ serialized the
 * data at the call: what the job does to the object afterwards is never written. `attempts: 1`.
 *
 * Why: lib/jobs/job-steps.ts `stepJob`, `updateData` while pending: `jsonOf(data)` is only a
 * check; the object itself is held (`held = { data, over }`) and set as `job.data`, and
 * `flush()` (after `commitAnswer`, lib/jobs/idempotent-jobs.service.ts `runStepped`) writes
 * `held.data` as it is then. The same reference is kept with a step (`keptStepData` at the
 * step's commit), so a step's kept data is also what the object became, not what was given.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "`job.updateData()` during the job's run,
 * until its work committed, is held: the job reads its new data at once, and BullMQ gets it
 * once that work committed" — "it", the data given at the call, as BullMQ would have it; and
 * "throws | its own error, as without the library ... its work rolled back".
 *
 * Control: the same job that does not touch `job.data` after the call completes, BullMQ has
 * `paymentId`.
 *
 * Severity: medium-low (the same failed-after-commit job as adversary 72, reached by code that
 * keeps working on `job.data` after saving it; BullMQ may also get a value the job never gave).
 *
 * Fails now: { state: 'failed', failedReason: 'Do not know how to serialize a BigInt',
 * caughtAtCall: false, rows: 1 } (expected: completed, BullMQ has { paymentId } as given).
 *
 * Fixed: the held data is its JSON at the call (`stepJob`, lib/jobs/job-steps.ts), as BullMQ
 * writes it then: later changes to the object are not written.
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
let caughtAtCall = false;

interface Payout {
  orderId: string;
  bigint: boolean;
  paymentId?: unknown;
}

async function startApp(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
  class Payouts extends WorkerHost {
    @IdempotentJob()
    async process(job: Job<Payout>) {
      const { rows } = await pool.query<{ id: string }>(
        'INSERT INTO payouts (order_id) VALUES ($1) RETURNING id',
        [job.data.orderId],
      );
      // A Prisma BigInt id, or the same id as text.
      const paymentId = job.data.bigint ? BigInt(rows[0].id) : rows[0].id;
      try {
        await job.updateData({ ...job.data, paymentId: rows[0].id });
      } catch (error) {
        caughtAtCall = true;
        throw error;
      }
      // Kept on the job's data for its own later use, after the save (BullMQ wrote it then).
      if (job.data.bigint) (job.data as Payout & { payment?: unknown }).payment = { id: paymentId };
      return { paid: job.data.orderId };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Payouts],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

async function payoutJob(queueName: string, data: Payout) {
  caughtAtCall = false;
  const app = await startApp(queueName);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add('payout', data, { attempts: 1 });
    await job.waitUntilFinished(events, 10_000).catch(() => undefined);
    const settled = (await queue.getJob(job.id!))!;
    const { rows } = await pool.query('SELECT 1 FROM payouts WHERE order_id = $1', [data.orderId]);
    return {
      state: await settled.getState(),
      failedReason: settled.failedReason,
      data: settled.data,
      caughtAtCall,
      rows: rows.length,
    };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 73: held job data changed after the call', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv73_held_mutated');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE payouts (id bigserial PRIMARY KEY, order_id text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: data not touched after the call: completed, BullMQ gets the data', async () => {
    const result = await payoutJob('untouched', { orderId: 'o-1', bigint: false });
    expect(result).toMatchObject({ state: 'completed', rows: 1, caughtAtCall: false });
    expect(result.data).toMatchObject({ paymentId: expect.any(String) });
  }, 60_000);

  it('data changed after the call: completed, BullMQ gets the data as given', async () => {
    const result = await payoutJob('changed-after', { orderId: 'o-2', bigint: true });
    // As without the library: the call wrote the data given; the later change is the job's own.
    expect(result).toMatchObject({ state: 'completed', rows: 1, caughtAtCall: false });
    expect(result.data).toMatchObject({ paymentId: expect.any(String) });
    expect(result.data).not.toHaveProperty('payment');
  }, 60_000);
});
