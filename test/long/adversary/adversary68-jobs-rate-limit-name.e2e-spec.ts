/**
 * Adversary 68: a job whose own error is named `RateLimitError` (an app's error class for a
 * partner's 429, written with the common `this.name = this.constructor.name` idiom, as BullMQ
 * writes its own) has the work it did before the error COMMITTED, and BullMQ's retry does it
 * again: two payouts for one job.
 *
 * The app: an `@IdempotentJob()` processor on the pool seam; the job inserts its payout row,
 * then calls a partner that answers 429 on its first run, which the job throws as its own
 * `class RateLimitError extends Error` (name 'RateLimitError', message "the partner answered
 * 429"). The job has `attempts: 2`.
 *
 * What happens: `isJobStep` / `stepMoveOf` (lib/jobs/job-failure.ts) tell BullMQ's steering
 * errors BY NAME, `RateLimitError` among them. BullMQ's worker does not: it tells its rate
 * limit by the MESSAGE `bullmq:rateLimitExceeded` (worker.js `handleFailed`: `err.message ===
 * RATE_LIMIT_ERROR`); only DelayedError, WaitingError and WaitingChildrenError go by name. So
 * `runStepped` takes the app's error for a step "moved another way (`worker.rateLimit()`)":
 * `keepStep` commits the job's work with its key unfinished (and publishes `jobStep`, move
 * `rate-limit`), while BullMQ sees an ordinary error: an attempt, a retry; the retry takes the
 * key over as its own step and inserts the payout again.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "throws | its own error, as without the
 * library (attempts, backoff, the failed set); its work rolled back". The step row is for a job
 * that "moves itself and throws BullMQ's DelayedError (...; also ... RateLimitError)": BullMQ's,
 * as BullMQ tells it.
 *
 * Control: the same job throwing an error of another name ('PartnerBusyError'): its work
 * rolled back, the retry completes, one payout.
 *
 * Severity: high (the job's effects twice, exactly what the library is for; needs only an
 * app error class of that name, an ordinary name for a 429).
 *
 * Fixed: BullMQ's rate limit is told by its message (`bullmq:rateLimitExceeded`), as its worker
 * tells it (`stepMoveOf` in lib/jobs/job-failure.ts); an error named RateLimitError is the job's.
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
let errorName = 'RateLimitError';

/** The app's own error for a partner's 429 (the `this.name = this.constructor.name` idiom). */
class PartnerError extends Error {
  constructor(message: string, name: string) {
    super(message);
    this.name = name;
  }
}

async function payout(job: Job<{ orderId: string }>) {
  await pool.query('INSERT INTO payouts (order_id) VALUES ($1)', [job.data.orderId]);
  // The partner answers 429 on the job's first run.
  if (job.attemptsMade === 0) throw new PartnerError('the partner answered 429', errorName);
  return { paid: job.data.orderId };
}

async function startApp(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
  class Payouts extends WorkerHost {
    @IdempotentJob()
    process(job: Job<{ orderId: string }>) {
      return payout(job);
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

async function payoutJob(queueName: string, name: string) {
  errorName = name;
  const orderId = `${queueName}-1`;
  const app = await startApp(queueName);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add('payout', { orderId }, { attempts: 2, backoff: 200 });
    const outcome = await job.waitUntilFinished(events, 10_000).then(
      () => 'completed',
      (error: Error) => error.message,
    );
    const settled = (await queue.getJob(job.id!))!;
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM payouts WHERE order_id = $1',
      [orderId],
    );
    return { outcome, attemptsMade: settled.attemptsMade, payouts: rows[0].n };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 68: a job error named RateLimitError', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv68_rate_limit');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE payouts (id serial PRIMARY KEY, order_id text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: an error of another name rolls its work back; one payout', async () => {
    const result = await payoutJob('busy', 'PartnerBusyError');
    expect(result).toEqual({ outcome: 'completed', attemptsMade: 2, payouts: 1 });
  }, 60_000);

  it("an app's error named RateLimitError rolls its work back too; one payout", async () => {
    const result = await payoutJob('limited', 'RateLimitError');
    // Fails: { outcome: 'completed', attemptsMade: 2, payouts: 2 }: the first run's insert
    // committed as a "step", and the retry inserted again.
    expect(result).toEqual({ outcome: 'completed', attemptsMade: 2, payouts: 1 });
  }, 60_000);
});
