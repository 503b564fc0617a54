/**
 * Adversary 77 (jobs): two jobs of one key (the app's own, `key: (job) => job.data.orderId`)
 * added together by `queue.addBulk()` (a producer's batch: one order twice, its retry) have
 * the same `job.timestamp`, BullMQ's time of adding, to the millisecond. The first runs and
 * marks its data as it returns; the second is completed with the first one's result, as
 * documented, but the library also writes the FIRST job's data onto the second job in BullMQ
 * (the data held as the first returned, kept with its result): the second job's data now says
 * it was charged by the first job, data it never had and never wrote.
 *
 *   @IdempotentJob({ key: (job) => job.data.orderId })
 *   async process(job: Job<{ orderId: string; chargedBy?: string }>) {
 *     await this.pool.query('INSERT INTO charges (order_id, job_id) VALUES ($1, $2)', [...]);
 *     await job.updateData({ ...job.data, chargedBy: job.id });
 *     return { charged: job.data.orderId };
 *   }
 *   await queue.addBulk([{ name: 'charge', data: { orderId } }, { name: 'charge', data: { orderId } }]);
 *
 * Why: lib/jobs/answer-held.ts `answerHeldHeader` keeps only `added` (`job.timestamp`) to name
 * the job whose data it is, and `answerHeldToWrite` writes it on any replay whose
 * `job.timestamp` equals it and whose current data equals the first job's data of before
 * (`over`). lib/jobs/idempotent-jobs.service.ts `runOnce`'s replay branch
 * (`writeAnswerHeld(where, job, claimed.response)`) calls it for every job of the key, not
 * only the one whose run kept it. Two jobs of one key added in one `addBulk` (or by two
 * producers in the same millisecond) share the time and, being one intent, the data: the
 * second gets the first one's data written, with no crash, on every such replay. (The header
 * stays on the key for as long as the key does, whether or not the first write succeeded.)
 *
 * What the docs promise (docs/guides/jobs.md): "The data (and progress) held as the job
 * returns is kept the same way, with its result: a worker that dies after that commit, before
 * BullMQ had them (...), leaves them there, and the job's replay writes them before it
 * completes; only where BullMQ still has what it had before the commit (not over an
 * operator's fix), and only for the same job (not one added again under its id)." The second
 * job is not the same job (another id); nothing died.
 *
 * Control: the same keyed app where the second job is added after the first completed (another
 * millisecond): its data is left as it was added; and the app without `@IdempotentJob()`,
 * where each job's data is its own (`chargedBy` its own id).
 *
 * Severity: low (no effect committed twice; another job's data rewritten in BullMQ: a board,
 * a `failed`/`completed` listener or a dead-letter flow that reads `job.data` reads what
 * another job did as its own; with progress held too, the second job's `progress` event and
 * value are the first one's).
 *
 * Fails now: the second job's data is `{ orderId: 'o-2-0', chargedBy: '1' }` (the first job's id),
 * not `{ orderId: 'o-2-0' }` as added. The two controls pass.
 *
 * Suggested fix: keep the job's id beside its time in the `bullmq-held` header (as adversary
 * 76's fix suggested: "same id and time") and write only on the replay of that job (`job.id`
 * and `job.timestamp` both equal).
 *
 * Fixed: the `bullmq-held` header keeps the job's id beside its time; `answerHeldToWrite`
 * writes only on a replay whose `job.id` and `job.timestamp` both match (a header without the
 * id, of an earlier version, writes nothing) (lib/jobs/answer-held.ts).
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

interface Charge {
  orderId: string;
  chargedBy?: string;
}

async function startApp(queue: string, idempotent: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class Charges extends WorkerHost {
    async process(job: Job<Charge>) {
      await pool.query('INSERT INTO charges (order_id, job_id) VALUES ($1, $2)', [
        job.data.orderId,
        job.id,
      ]);
      await job.updateData({ ...job.data, chargedBy: job.id });
      return { charged: job.data.orderId };
    }
  }
  if (idempotent) {
    // `@IdempotentJob({ key })` on `process`, as written above it.
    const descriptor = Object.getOwnPropertyDescriptor(Charges.prototype, 'process')!;
    IdempotentJob({ key: (job: { data: unknown }) => (job.data as Charge).orderId })(
      Charges.prototype,
      'process',
      descriptor,
    );
    Object.defineProperty(Charges.prototype, 'process', descriptor);
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Charges],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

/**
 * Two jobs of one order: added together (`addBulk`, until BullMQ gave both the same time) or
 * the second once the first completed. What each finished with, and each one's data.
 */
async function twins(queueName: string, orderId: string, idempotent: boolean, together: boolean) {
  const app = await startApp(queueName, idempotent);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  const finished = (job: Job) =>
    job.waitUntilFinished(events, 30_000).then(
      (value: unknown) => ({ state: 'completed', value }),
      (error: Error) => ({ state: 'failed', reason: error.message }),
    );
  try {
    await events.waitUntilReady();
    let first: Job;
    let second: Job;
    if (together) {
      // A batch of one order twice; BullMQ times each job as it makes it (Date.now()): the
      // same millisecond almost always, asked again (another order) where it was not.
      let tries = 0;
      for (;;) {
        const order = `${orderId}-${tries}`;
        [first, second] = await queue.addBulk([
          { name: 'charge', data: { orderId: order } },
          { name: 'charge', data: { orderId: order } },
        ]);
        if (first.timestamp === second.timestamp) break;
        await Promise.all([finished(first), finished(second)]);
        tries += 1;
        if (tries > 20) throw new Error('addBulk never timed two jobs alike');
      }
    } else {
      first = await queue.add('charge', { orderId: `${orderId}-0` });
      await finished(first);
      second = await queue.add('charge', { orderId: `${orderId}-0` });
    }
    const settled = await Promise.all([finished(first), finished(second)]);
    const data = async (job: Job) => (await queue.getJob(job.id!))!.data as Charge;
    return {
      settled,
      first: { id: first.id, data: await data(first) },
      second: { id: second.id, data: await data(second) },
      order: first.data.orderId,
    };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 77: the data a job held as it returned written onto a twin of its key', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv77_jobs_held_twin');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE charges (id serial PRIMARY KEY, order_id text NOT NULL, job_id text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without @IdempotentJob(), added together: each job data its own', async () => {
    const run = await twins('adv77-twin-plain', 'o-1', false, true);
    expect(run.first.data).toEqual({ orderId: run.order, chargedBy: run.first.id });
    expect(run.second.data).toEqual({ orderId: run.order, chargedBy: run.second.id });
  }, 60_000);

  it('control: keyed, the second added after the first completed: its data as added', async () => {
    const run = await twins('adv77-twin-later', 'o-3', true, false);
    const value = { charged: run.order };
    expect(run.settled).toEqual([
      { state: 'completed', value },
      { state: 'completed', value },
    ]);
    expect(run.first.data).toEqual({ orderId: run.order, chargedBy: run.first.id });
    expect(run.second.data).toEqual({ orderId: run.order });
  }, 60_000);

  it('keyed, added together: the second completed with the first result, its data its own', async () => {
    const run = await twins('adv77-twin-bulk', 'o-2', true, true);
    const value = { charged: run.order };
    expect(run.settled).toEqual([
      { state: 'completed', value },
      { state: 'completed', value },
    ]);
    const { rows } = await pool.query<{ job_id: string }>(
      'SELECT job_id FROM charges WHERE order_id = $1',
      [run.order],
    );
    expect(rows.map((row) => row.job_id)).toEqual([run.first.id]);
    expect(run.first.data).toEqual({ orderId: run.order, chargedBy: run.first.id });
    expect(run.second.data).toEqual({ orderId: run.order });
  }, 60_000);
});
