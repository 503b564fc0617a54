/**
 * Adversary 72: a job that saves in its data what BullMQ cannot write (a BigInt: a Prisma
 * `BigInt` id, `job.updateData({ ...job.data, paymentId: payment.id })`; or a cycle, an ORM
 * entity with its relations) is failed AFTER its work committed: BullMQ's failed set holds a
 * job whose payout row is in the database and whose key is done, failed by an error its code
 * never saw (its `updateData` returned), and its retry "completes" without running.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam: it inserts its payout row, saves
 * the payout's id in its data (`job.updateData`, wrapped in a try/catch that would tell it the
 * save failed) and returns. `attempts: 1`.
 *
 * What happens: `updateData` during the run is held (lib/jobs/job-steps.ts, `stepJob`: the new
 * data is set on the job object, nothing written, nothing serialized), so the job's call
 * returns and the job goes on and returns. `runStepped` (lib/jobs/idempotent-jobs.service.ts)
 * commits the work and the result (`commitAnswer`), THEN writes the held data
 * (`stepped.flush()`): BullMQ's `Job.updateData` throws "Do not know how to serialize a
 * BigInt" there, after the commit. The error reaches `run()` as the library's (not the
 * work's), is classified `throw`: BullMQ counts the attempt and fails the job. The row stays,
 * the key is done; `job.retry()` completes with the kept result, nothing run, BullMQ's data
 * never updated.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "throws | its own error, as without the
 * library (attempts, backoff, the failed set); its work rolled back"; and "`job.updateData()`
 * ... is held: the job reads its new data at once, and BullMQ gets it once that work
 * committed". Without the library `updateData` throws at the call, where the job can catch it.
 * A held update that BullMQ would refuse should be refused at the call (the job's own error,
 * its work rolled back), not after the work committed.
 *
 * Control: the same job saving a JSON id (a string) completes, its data updated in BullMQ.
 *
 * Severity: medium (a job in the failed set whose effects committed: the failed-job alert and
 * the operator's retry disagree with the database; the job's own try/catch never sees the
 * error; with attempts > 1 the next attempt replays and BullMQ never gets the data).
 *
 * Fails now: { state: 'failed', failedReason: 'Do not know how to serialize a BigInt',
 * caughtAtCall: false, rows: 1 }.
 *
 * Fixed: a held `updateData()` is written to JSON at the call (`jsonOf`, lib/jobs/job-steps.ts):
 * what BullMQ could not write throws there, its own error, as BullMQ's would.
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
        await job.updateData({ ...job.data, paymentId });
      } catch (error) {
        caughtAtCall = true;
        throw error;
      }
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

onRedis('adversary 72: held job data that BullMQ cannot write', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv72_held_data');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE payouts (id bigserial PRIMARY KEY, order_id text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: a JSON id saved in the data completes, BullMQ gets the data', async () => {
    const result = await payoutJob('text-id', { orderId: 'o-1', bigint: false });
    expect(result).toMatchObject({ state: 'completed', rows: 1, caughtAtCall: false });
    expect(result.data).toMatchObject({ paymentId: expect.any(String) });
  }, 60_000);

  it('a BigInt saved in the data: refused at the call, nothing committed (not failed after the commit)', async () => {
    const result = await payoutJob('bigint-id', { orderId: 'o-2', bigint: true });
    // A failed job is one whose work rolled back, and its code met the refusal where it called.
    expect(result).toMatchObject({ state: 'failed', caughtAtCall: true, rows: 0 });
  }, 60_000);
});
