/**
 * Adversary 72: a job that moves itself back to the wait list between its steps
 * (`job.moveToWait(token)`, `throw new WaitingError()`: BullMQ's way to give other jobs their
 * turn between the steps of a long one) has a committed step done AGAIN: its next run, taken
 * by the worker's other slot as the job moved, starts from the data BullMQ had before the step
 * and takes the key over once the step has committed. Two of four jobs of five steps wrote a
 * step twice. Besides, each step stalls about a second (its next run refused as "in progress"
 * by its own run) and costs an extra start (`attemptsStarted`, which `maxStartedAttempts`
 * counts): five steps take seconds where BullMQ takes milliseconds.
 *
 * The app: an `@IdempotentJob()` processor (worker `concurrency: 2`) running BullMQ's step
 * idiom (https://docs.bullmq.io/patterns/process-step-jobs) with `moveToWait`: each step
 * inserts its row, saves the next step (`job.updateData`, held), `await job.moveToWait(token)`,
 * `throw new WaitingError()`; the last returns.
 *
 * What happens: `stepJob` (lib/jobs/job-steps.ts) commits a step before the job moves only for
 * `moveToDelayed` (and after it for `moveToWaitingChildren`); `moveToWait` is not among
 * `STEPPED`, so the job is in the wait list at once, its step uncommitted and its held data
 * unwritten; they follow in `runStepped`'s `keepStep`, then `stepped.flushStep()` (the data
 * written to BullMQ, then noted `written` on the key: lib/jobs/idempotent-jobs.service.ts).
 * The other slot fetches the job at once, with the data of before the step. Where its claim
 * comes before the step's commit, it is moved to the delayed set (~1 s, the stall). Where it
 * comes after the note, it takes the key over (the step's owner is the same job), and
 * `dataToRestore` (lib/jobs/job-steps.ts) restores nothing, since the key says BullMQ has the
 * step's data (`written`): but this run's job object was read before that write. It runs the
 * step again from its stale data, and commits it.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "moves itself and throws BullMQ's
 * `DelayedError` (...; also `WaitingChildrenError`, `WaitingError`, ...) | the same as without
 * the library: what it did so far commits, its key stays unfinished and named the job's, and
 * its next run goes on" (on from the step, not the step again), and the guide's first line:
 * "makes a job's database work happen once per key".
 *
 * Control: the same processor without the decorator: each step once, one start per step, in
 * milliseconds.
 *
 * Severity: high (a committed step's effects applied twice, the very thing the library is
 * for; `WaitingError` is listed as supported; the race is won often on an idle machine).
 *
 * Fails now: rows 21-22 for 4 jobs x 5 steps (a step twice, e.g. steps 1,1,2,3,4,5), and
 * attemptsStarted 8-10 per job where BullMQ has 5.
 *
 * Fixed: `moveToWait()` is stepped as `moveToDelayed()` is (lib/jobs/job-steps.ts): the step
 * commits, and its data reaches BullMQ, before the job moves.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents, WaitingError } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

const STEPS = 5;

async function step(job: Job<{ step?: number }>, token?: string) {
  const at = job.data.step ?? 1;
  await pool.query('INSERT INTO steps (job, step) VALUES ($1, $2)', [job.queueName, at]);
  if (at < STEPS) {
    await job.updateData({ step: at + 1 });
    await job.moveToWait(token);
    throw new WaitingError();
  }
  return { steps: at };
}

async function startApp(queue: string, decorated: boolean) {
  let processor: unknown;
  if (decorated) {
    @Processor(queue, { concurrency: 2 })
    class Steps extends WorkerHost {
      @IdempotentJob()
      async process(job: Job<{ step?: number }>, token?: string) {
        return step(job, token);
      }
    }
    processor = Steps;
  } else {
    @Processor(queue, { concurrency: 2 })
    class Steps extends WorkerHost {
      async process(job: Job<{ step?: number }>, token?: string) {
        return step(job, token);
      }
    }
    processor = Steps;
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
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

async function steppedJobs(queueName: string, decorated: boolean, jobs: number) {
  const app: INestApplicationContext = await startApp(queueName, decorated);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const began = Date.now();
    const values: unknown[] = [];
    const started: number[] = [];
    for (let i = 0; i < jobs; i++) {
      const job = await queue.add('steps', {});
      values.push(await job.waitUntilFinished(events, 30_000));
      started.push((await queue.getJob(job.id!))!.attemptsStarted);
    }
    const ms = Date.now() - began;
    const { rows } = await pool.query('SELECT 1 FROM steps WHERE job = $1', [queueName]);
    return { values, ms, started, rows: rows.length };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 72: a step job that moves itself back to the wait list', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv72_move_to_wait');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE steps (job text NOT NULL, step int NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  const done = Array.from({ length: 4 }, () => ({ steps: STEPS }));
  const once = Array.from({ length: 4 }, () => STEPS);

  it('control: without the decorator, each step once, one start each, at once', async () => {
    const result = await steppedJobs('plain', false, 4);
    expect(result).toMatchObject({ values: done, rows: 4 * STEPS, started: once });
    expect(result.ms).toBeLessThan(4000);
  }, 60_000);

  it('with @IdempotentJob(): each step once (not again from stale data), one start each', async () => {
    const result = await steppedJobs('decorated', true, 4);
    expect(result).toMatchObject({ values: done, rows: 4 * STEPS, started: once });
  }, 90_000);
});
