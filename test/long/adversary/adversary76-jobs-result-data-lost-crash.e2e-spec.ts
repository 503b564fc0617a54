/**
 * Adversary 76: the data a job saves as it finishes (`job.updateData()` before it returns its
 * result) is held by the library until the job's work commits, and written to BullMQ only
 * after that commit; a worker that dies in between (SIGKILL, an OOM kill, a node drained past
 * its grace period) leaves BullMQ the job's data of before, for good: the job's next run (the
 * stalled job taken back) finds its key done and completes with the kept result without
 * writing the data, which is kept nowhere. A step's data is kept on the key and given back;
 * the last data of a job that finished is not.
 *
 * The user code (a processor that marks its job as it goes, as a board or a dead-letter flow
 * reads it):
 *
 *   @IdempotentJob()
 *   async process(job: Job<{ orderId: string; status?: string }>) {
 *     await this.pool.query('INSERT INTO payouts (order_id) VALUES ($1)', [job.data.orderId]);
 *     await job.updateData({ ...job.data, status: 'paid' });
 *     return { paid: true };
 *   }
 *
 * Why: lib/jobs/idempotent-jobs.service.ts `runStepped` commits the answer (`commitAnswer`,
 * which publishes `stored`), then `await stepped.flush()` writes the held data
 * (lib/jobs/job-steps.ts `stepJob`'s `flush`). A worker killed between the two leaves the key
 * done with no data kept on it (`RELEASE_JOB_STEP`/`STEP_DATA` are a step's only); the next
 * run takes the `replay` branch of `runOnce` (`claimed.kind === 'replay'`: `return
 * resultOf(claimed.response)`) before any `dataToRestore`, so the held data is never written.
 *
 * What the docs promise (docs/guides/jobs.md): "`job.updateData()` during the job's run, until
 * its work committed, is held: the job reads its new data at once, and BullMQ gets it once that
 * work committed (its step, or its result), or never, if it rolled back." And: "The data a step
 * leaves is kept with the step's work, on its key: a worker that dies after the step committed,
 * before BullMQ had the data, leaves it there, and the job's next run gives it back to BullMQ
 * before it runs". (Progress is said not to be kept; data is not said to be lost.)
 *
 * The test: a real worker process (the compiled library, `@nestjs/bullmq`), killed by SIGKILL
 * right after its work committed (on the library's `idempotency:stored` event: the commit is
 * done, the held data not yet written), as a worker dies at any instant. A second worker takes
 * the stalled job back.
 *
 * Control: the same worker without `@IdempotentJob()`, killed at the same point (its insert
 * committed, its `updateData` done, before BullMQ hears that the job completed): BullMQ has
 * `status: 'paid'` (and, without the library, the payout is made twice: why the library is
 * there; the control shows only that the data is BullMQ's once the work is done).
 *
 * Severity: medium (a lost answer: the job's final data, what it says it did, is lost for good
 * although its work committed; a board or a dead-letter flow that reads `job.data.status`
 * reads the data of before the payout, and an operator's `job.retry()` flow that reads it is
 * misled).
 *
 * Fails now: the job completes with { paid: true } and one payout, but BullMQ's data is
 * { orderId: 'o-1' }, without status 'paid'.
 *
 * Suggested fix: keep the held data with the result as a step's is (on the key, in the answer's
 * commit), and on a replay of a job whose own key it is (same id and time), give it back to
 * BullMQ (`updateData`) before completing, as `dataToRestore` does for a step.
 *
 * Fixed: the data and progress held as the job returns are kept with its result, in its
 * answer's commit (a `bullmq-held` header: lib/jobs/answer-held.ts); the same job's replay
 * writes them where BullMQ still has what it had before, and a final write that fails is
 * delayed (no attempt) for that replay.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue, QueueEvents } from 'bullmq';
import { Client } from 'pg';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { type ReadyProcess, startReadyProcess } from '../../support/ready-process.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

const WORKER = `
import 'reflect-metadata';
import { subscribe } from 'node:diagnostics_channel';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import pg from 'pg';
import { IdempotencyModule, IdempotentJob } from '${join(process.cwd(), 'dist/lib/index.js')}';

const env = process.env;
const idempotent = env.IDEMPOTENT !== '0';
const crash = env.CRASH === '1';
const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 4 });
const die = () => process.kill(process.pid, 'SIGKILL');
// Its work committed (the library's answer stored with it): the worker dies here.
if (idempotent && crash) subscribe('idempotency:stored', die);

class Payouts extends WorkerHost {
  async process(job) {
    console.log('ran ' + job.id);
    await pool.query('INSERT INTO payouts (order_id, cents, worker) VALUES ($1, 0, $2)', [
      job.data.orderId,
      env.WORKER,
    ]);
    await job.updateData({ ...job.data, status: 'paid' });
    // Without the library its work is committed here: the worker dies at the same point.
    if (!idempotent && crash) die();
    return { paid: true };
  }
}
if (idempotent) {
  const method = Object.getOwnPropertyDescriptor(Payouts.prototype, 'process');
  Object.defineProperty(
    Payouts.prototype,
    'process',
    IdempotentJob()(Payouts.prototype, 'process', method) ?? method,
  );
}
Processor(env.QUEUE, { lockDuration: 2000, stalledInterval: 1000, maxStalledCount: 5 })(Payouts);
class WorkerModule {}
Module({
  imports: [
    IdempotencyModule.forRoot({ globalKeys: true, pool, leaseMs: 2000 }),
    BullModule.forRoot({ connection: { host: '127.0.0.1', port: Number(env.REDIS_PORT) } }),
    BullModule.registerQueue({ name: env.QUEUE }),
  ],
  providers: [Payouts],
})(WorkerModule);
await NestFactory.createApplicationContext(WorkerModule, { logger: ['error', 'warn'] });
console.log('ready');
`;

let redis: TestRedis;
let database: MigratedDatabase;
let admin: Client;
let dir: string;
let script: string;
const workers: ReadyProcess[] = [];

/** A worker process of the script above. */
async function startWorker(env: Record<string, string>): Promise<ReadyProcess> {
  const worker = await startReadyProcess(
    script,
    { DATABASE_URL: database.url, REDIS_PORT: String(redis.port), ...env },
    'the adversary 76 worker to start',
  );
  workers.push(worker);
  return worker;
}

/** Runs one job on a worker killed after its work, then on a second worker; what stands. */
async function finishedAfterCrash(queueName: string, idempotent: boolean) {
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await Promise.all([queue.waitUntilReady(), events.waitUntilReady()]);
    const flag = idempotent ? '1' : '0';
    const first = await startWorker({
      QUEUE: queueName,
      IDEMPOTENT: flag,
      CRASH: '1',
      WORKER: 'a',
    });
    const job = await queue.add('payout', { orderId: `${queueName}-1` }, { attempts: 3 });
    await new Promise<void>((resolve) => first.child.once('exit', () => resolve()));
    await startWorker({ QUEUE: queueName, IDEMPOTENT: flag, CRASH: '0', WORKER: 'b' });
    const result = (await job.waitUntilFinished(events, 60_000)) as unknown;
    const stored = (await queue.getJob(job.id!))!;
    const { rows } = await admin.query('SELECT worker FROM payouts WHERE order_id = $1', [
      `${queueName}-1`,
    ]);
    return { result, data: stored.data as unknown, payouts: rows.length };
  } finally {
    await Promise.all(workers.splice(0).map((worker) => worker.kill()));
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
  }
}

onRedis(
  'adversary 76: a job killed after its work committed, before its held data was written',
  () => {
    beforeAll(async () => {
      redis = await startTestRedis();
      database = await createMigratedDatabase('adv76_result_data');
      admin = new Client({ connectionString: database.url });
      await admin.connect();
      await admin.query(
        'CREATE TABLE payouts (id serial PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL, worker text NOT NULL)',
      );
      dir = mkdtempSync(join(process.cwd(), 'dist', 'adv76-'));
      script = join(dir, 'worker.mjs');
      writeFileSync(script, WORKER);
    }, 60_000);

    afterAll(async () => {
      await Promise.all(workers.splice(0).map((worker) => worker.kill()));
      if (dir) rmSync(dir, { recursive: true, force: true });
      await admin?.end();
      await database?.drop();
      await redis?.stop();
    });

    it('control: without the library, BullMQ has the data the job saved before it died', async () => {
      const outcome = await finishedAfterCrash('plain', false);
      expect(outcome.result).toEqual({ paid: true });
      expect(outcome.data).toEqual({ orderId: 'plain-1', status: 'paid' });
    }, 120_000);

    it('with @IdempotentJob(): its work committed, BullMQ has the data it saved', async () => {
      const outcome = await finishedAfterCrash('decorated', true);
      expect(outcome.result).toEqual({ paid: true });
      expect(outcome.payouts).toBe(1);
      expect(outcome.data).toEqual({ orderId: 'decorated-1', status: 'paid' });
    }, 120_000);
  },
);
