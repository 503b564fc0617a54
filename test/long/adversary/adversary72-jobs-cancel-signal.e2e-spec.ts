/**
 * Adversary 72: BullMQ's job cancellation (`worker.cancelJob(id, reason)`,
 * `worker.cancelAllJobs()`: https://docs.bullmq.io/guide/workers/cancelling-jobs) never reaches
 * an `@IdempotentJob()` processor: the `AbortSignal` BullMQ gives `process(job, token, signal)`
 * is not made, nor passed on. `cancelJob` answers false and the job runs to its end and
 * completes; its code, written for the signal (`signal.addEventListener('abort', …)`), gets
 * `undefined`.
 *
 * The app: a processor as BullMQ's page writes one, its third parameter the signal: it inserts
 * its export row, then waits on a slow export (3 s) that it abandons when the signal aborts
 * (`signal?.addEventListener('abort', () => reject(...))`); an operator's "cancel" calls
 * `worker.cancelJob(job.id, 'cancelled by the operator')` (the processor's `this.worker`,
 * `@nestjs/bullmq`'s `WorkerHost`).
 *
 * What happens: BullMQ makes a job's AbortController only where its processor takes three
 * parameters (bullmq/dist/cjs/classes/worker.js: `processorAcceptsSignal = processor.length >=
 * 3`); `@nestjs/bullmq` binds the method, keeping its length. The decorator's replacement
 * (lib/jobs/idempotent-job.decorator.ts: `async function idempotentJob(this, job, token)`)
 * takes two, so no controller is made, and it calls the method with `(job, token)` only
 * (`process.call(this, stepped, token)`), so a signal could not reach it either.
 * `lockManager.cancelJob` finds no controller: false. The job completes after its 3 s, its row
 * committed.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees": "throws | its own error, as without the
 * library (attempts, backoff, the failed set); its work rolled back"; the decorator goes "on
 * the processor's method (`@nestjs/bullmq`'s `WorkerHost.process` ...)" with no word of
 * giving up BullMQ's signal): the job is cancelled as without the library, its error is its
 * own (failed, 'cancelled by the operator'), and its work rolls back.
 *
 * Control: the same processor without `@IdempotentJob()`: `cancelJob` answers true and the job
 * fails at once with the operator's reason.
 *
 * Severity: medium (BullMQ 6's cancellation, `cancelJob` and `cancelAllJobs` (a graceful
 * shutdown's "stop what you are doing"), is lost for every decorated processor, silently:
 * `cancelJob` says false as for a job not running; a processor that reads `signal.aborted`
 * without `?.` throws a TypeError on every job).
 *
 * Fails now: { cancelled: false, state: 'completed', rows: 1 }.
 *
 * Fixed: the decorator's wrapper takes as many parameters as the method (its `length`), and
 * passes BullMQ's signal on (lib/jobs/idempotent-job.decorator.ts).
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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The export: 3 s, abandoned when the signal aborts. */
async function exportFor(job: Job<{ reportId: string }>, signal?: AbortSignal) {
  await pool.query('INSERT INTO exports (report_id) VALUES ($1)', [job.data.reportId]);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, 3000);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      reject(new Error(String(signal.reason)));
    });
  });
  return { exported: job.data.reportId };
}

async function startApp(queue: string, decorated: boolean) {
  let processor: WorkerHost;
  if (decorated) {
    @Processor(queue)
    class Exports extends WorkerHost {
      @IdempotentJob()
      async process(job: Job<{ reportId: string }>, token?: string, signal?: AbortSignal) {
        void token;
        return exportFor(job, signal);
      }
    }
    processor = Exports as never;
  } else {
    @Processor(queue)
    class Exports extends WorkerHost {
      async process(job: Job<{ reportId: string }>, token?: string, signal?: AbortSignal) {
        void token;
        return exportFor(job, signal);
      }
    }
    processor = Exports as never;
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [processor as never],
  })
  class AppModule {}
  const app: INestApplicationContext = await NestFactory.createApplicationContext(AppModule, {
    logger: [],
  });
  return { app, host: app.get<WorkerHost>(processor as never) };
}

async function cancelledExport(queueName: string, reportId: string, decorated: boolean) {
  const { app, host } = await startApp(queueName, decorated);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add('export', { reportId }, { attempts: 1 });
    for (let i = 0; i < 50 && (await job.getState()) !== 'active'; i++) await sleep(50);
    await sleep(300);
    const cancelled = host.worker.cancelJob(job.id!, 'cancelled by the operator');
    const outcome = await job.waitUntilFinished(events, 10_000).then(
      () => 'completed',
      (error: Error) => error.message,
    );
    const settled = (await queue.getJob(job.id!))!;
    const { rows } = await pool.query('SELECT 1 FROM exports WHERE report_id = $1', [reportId]);
    return { cancelled, outcome, state: await settled.getState(), rows: rows.length };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 72: BullMQ job cancellation (AbortSignal) and @IdempotentJob()', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv72_cancel');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE exports (report_id text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the decorator, cancelJob fails the job with its reason', async () => {
    const result = await cancelledExport('plain', 'r-1', false);
    expect(result).toMatchObject({
      cancelled: true,
      outcome: 'cancelled by the operator',
      state: 'failed',
    });
  }, 60_000);

  it('with @IdempotentJob(): cancelled the same, its work rolled back', async () => {
    const result = await cancelledExport('decorated', 'r-2', true);
    expect(result).toMatchObject({
      cancelled: true,
      outcome: 'cancelled by the operator',
      state: 'failed',
      rows: 0,
    });
  }, 60_000);
});
