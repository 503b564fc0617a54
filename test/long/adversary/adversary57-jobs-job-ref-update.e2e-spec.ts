/**
 * Adversary 57: a request-scoped processor saves its next step through the job NestJS injects
 * (`@Inject(JOB_REF)`): `updateData` is not held, so BullMQ keeps a step whose work then rolls
 * back, and the job's retry skips it: the job completes without step one.
 *
 * The app: a request-scoped consumer as NestJS documents it (techniques/queues,
 * "Request-scoped consumers": `constructor(@Inject(JOB_REF) jobRef: Job)`), which jobs.md says
 * is run the same way ("A processor made per job (a request-scoped consumer,
 * `@Inject(JOB_REF)`) is run the same way"). Its `process` is `@IdempotentJob()` and runs
 * BullMQ's step idiom in one run (https://docs.bullmq.io/patterns/process-step-jobs: a step's
 * work, then `updateData({ step: next })`, in a loop), saving each step through the job it was
 * given (`this.jobRef.updateData(...)`). Step two fails on the first attempt (`attempts: 2`).
 *
 * What happens: the hold is on the job its run hands the method only (`steppedJob`,
 * lib/jobs/job-steps.ts: a Proxy around the job, passed as the method's argument by the
 * decorator, lib/jobs/idempotent-job.decorator.ts). `JOB_REF` is BullMQ's own job object, the
 * same the proxy wraps, unwrapped: its `updateData` writes to Redis at once. Step one's row is
 * in the job's transaction; step two throws; the transaction rolls back (step one's row gone),
 * but BullMQ keeps `step: 'second'`. The retry starts at step two and completes: `second`
 * only, the job told done without step one.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "`job.updateData()` while the job's work
 * is uncommitted is held: the job reads its new data at once, and BullMQ gets it once that work
 * committed (its step, or its result), or never, if it rolled back. So BullMQ's step idiom (the
 * next step saved in the job's data) never skips a step whose work a failure rolled back." —
 * the job is the job, whichever handle of it the processor holds.
 *
 * Control: the same processor saving its steps through the job argument (`job.updateData`)
 * completes with both steps.
 *
 * Severity: high (a job told done while its work is lost; the 58d50f6 fix is bypassed by
 * NestJS's own documented way to reach the job).
 *
 * Fixed: the run steps the job object itself, for its run (`stepJob`), not a Proxy of it: the
 * job `JOB_REF` gives is the one BullMQ hands `process`, so its updateData is held too.
 */
import 'reflect-metadata';
import { Inject, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, JOB_REF, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents } from 'bullmq';
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
  step?: 'first' | 'second' | 'finish';
}

/**
 * BullMQ's step idiom (docs.bullmq.io/patterns/process-step-jobs): each step's work, then the
 * next step saved in the job's data. Step two fails on the job's first attempt.
 */
async function steps(job: Job<Order>, saveStep: (data: Order) => Promise<void>): Promise<unknown> {
  let step = job.data.step ?? 'first';
  while (step !== 'finish') {
    await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
      job.data.orderId,
      step,
    ]);
    if (step === 'second' && job.attemptsMade === 0) {
      throw new Error(`the ledger refused ${job.data.orderId} (attempt 1)`);
    }
    step = step === 'first' ? 'second' : 'finish';
    await saveStep({ ...job.data, step });
  }
  return { done: job.data.orderId };
}

async function startApp(
  queue: string,
  through: 'job-ref' | 'param',
): Promise<INestApplicationContext> {
  @Processor(queue)
  class Scoped extends WorkerHost {
    constructor(@Inject(JOB_REF) private readonly jobRef: Job<Order>) {
      super();
    }
    @IdempotentJob()
    process(job: Job<Order>) {
      return steps(job, (data) =>
        through === 'job-ref' ? this.jobRef.updateData(data) : job.updateData(data),
      );
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Scoped],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
}

async function runJob(queueName: string, through: 'job-ref' | 'param') {
  const app = await startApp(queueName, through);
  const connection = { port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add('order', { orderId: queueName }, { attempts: 2 });
    const outcome = await job.waitUntilFinished(events, 20_000).then(
      (value: unknown) => ({ completed: value }),
      (error: Error) => ({ failed: error.message }),
    );
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM steps WHERE order_id = $1 ORDER BY id',
      [queueName],
    );
    return { outcome, steps: rows.map((row) => row.step) };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 57: a request-scoped step job saving its steps through JOB_REF', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv57_job_ref_update');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: saved through the job argument, both steps commit', async () => {
    expect(await runJob('param', 'param')).toEqual({
      outcome: { completed: { done: 'param' } },
      steps: ['first', 'second'],
    });
  }, 60_000);

  it('saved through JOB_REF, a retried job does not skip its rolled-back step', async () => {
    // Fails: { outcome: { completed: { done: 'job-ref' } }, steps: ['second'] }.
    expect(await runJob('job-ref', 'job-ref')).toEqual({
      outcome: { completed: { done: 'job-ref' } },
      steps: ['first', 'second'],
    });
  }, 60_000);
});
