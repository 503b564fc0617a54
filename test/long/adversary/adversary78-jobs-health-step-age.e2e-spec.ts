/**
 * Adversary 78: a job of BullMQ's step idiom whose steps are further apart than the health
 * indicator's `maxUnfinishedAgeMs` makes the store DOWN ("its lease is still renewed: its work
 * hangs") every time a later step runs, however briefly: the key's age counts from its FIRST
 * step, the time between the steps (which the docs say is not counted) included.
 *
 * The user code: the docs' worker (`IdempotencyModule`, `@IdempotentJob()` on
 * `WorkerHost.process`) with BullMQ's step idiom: the first step writes its row, saves its next
 * step (`updateData`), moves itself to the delayed set (`moveToDelayed(now + delay, token)`,
 * `DelayedError`: "check the payment again in 15 minutes"); the second step writes its row and
 * returns within a second. The app's health check is the docs' one:
 * `IdempotencyHealthIndicator.isHealthy('idempotency', { maxUnfinishedAgeMs })`, with
 * `maxUnfinishedAgeMs` longer than its slowest job step (the test: 3 s, a 4 s delay between the
 * steps, the second step held for the look; in production 10 minutes and a 15 minute delay).
 *
 * Why it breaks: lib/health/idempotency.health-indicator.ts `UNFINISHED_BY_LEASE` measures
 * `clock_timestamp() - min(created_at)` of the keys under a live lease. A job's key is created
 * by its first step and kept `started` across its steps (lib/jobs/idempotent-jobs.service.ts,
 * the step's RELEASE_JOB_STEP); between the steps its lease is NULL (not counted), but when
 * the job comes back its next step leases the same row again, whose `created_at` is the first
 * step's. lib/health/store-health.ts then finds it "unfinished for longer than
 * maxUnfinishedAgeMs" and blames a hang. The oldest-unfinished-key gauge
 * (`OLDEST_UNFINISHED`, the same `min(created_at)`) jumps to the job's whole age in the same way.
 *
 * The docs it contradicts: docs/guides/jobs.md, "Operations": "Health, `doctor` and the
 * oldest-unfinished-key gauge count a job whose worker died (its lease ran out) as they count a
 * request's; a job between its steps (its lease ended on purpose, BullMQ holding it delayed) is
 * not stuck, and is not counted"; docs/reference/events-and-metrics.md (the gauge): "nor a
 * job's key between its steps, waiting for BullMQ to bring the job back"; the indicator's own
 * docs: `maxUnfinishedAgeMs` "longer than the slowest request".
 * (docs/reference/health.md's own words, "a key has been unfinished longer than
 * `maxUnfinishedAgeMs` while a lease holds it", can be read literally as what the code does;
 * but its verdict, "its work hangs", is false of a step that began a second ago, and the jobs
 * guide says the time between the steps is not counted. A request given back with a 503 and
 * resumed by its retry much later is aged the same way.)
 *
 * Severity: medium (no effect runs twice, but the health check that a worker's liveness or
 * readiness probe reads goes down on every later step of every job whose steps wait longer
 * than the bound, the documented step idiom with BullMQ's own delays: workers restarted
 * mid-step by their orchestrator, and an alert on the gauge that cannot be set below the
 * longest delay between steps, so it no longer tells a hang).
 *
 * Fails now: during the second step (run 4 s after the first, brief), `isHealthy` answers down:
 * "a key has been unfinished for longer than 3000 ms (maxUnfinishedAgeMs): its lease is still
 * renewed: its work hangs", `oldestUnfinishedAgeMs` about 4 s.
 *
 * Control: the same job with a delay between its steps well within the bound (0.2 s): up
 * during its second step.
 *
 * Suggested fix: age a key's current hold, not its creation: record when its lease was taken
 * (a step's or a takeover's claim sets a `leased_at`, or the step's RELEASE/claim moves a
 * column the health and gauge read), and measure `clock_timestamp() - leased_at` for held
 * keys (expired ones from their lease's end, as `doctor` does).
 *
 * Fixed: a key records when its current hold began: a new nullable column `leased_at`
 * (migrations/1764461700000-AddLeasedAt.ts, in IDEMPOTENCY_MIGRATIONS and schema.sql; the
 * start-up schema check names the migration when it is missing), set by TAKE_OVER
 * (lib/claim/postgres-statements.ts), the only statement that leases an existing row (a job's
 * next step, a retry after a 503, a takeover after a crash). Health's UNFINISHED_BY_LEASE and
 * the gauge's OLDEST_UNFINISHED age held and expired keys from
 * `coalesce(leased_at, created_at)` (HOLD_STARTED); a first claim's hold began at `created_at`.
 * Expired keys are aged from their hold's start too (the lease's length plus the time since it
 * ran out), not from the lease's end: one meaning for both ages. `doctor` ages expired keys from
 * `locked_until` already and is unchanged. The memory store keeps `leasedAt` the same way.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { TerminusModule } from '@nestjs/terminus';
import { DelayedError, type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyHealthIndicator } from '../../../lib/health/index.js';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

const MAX_UNFINISHED_AGE_MS = 3_000;

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

interface CheckJob {
  orderId: string;
  step: 'charge' | 'confirm';
  delayMs: number;
}

/** What the health check answered while the second step ran. */
let seen: unknown;

@Processor('checks')
class Checks extends WorkerHost {
  constructor(private readonly idempotency: IdempotencyHealthIndicator) {
    super();
  }

  @IdempotentJob()
  async process(job: Job<CheckJob>, token?: string) {
    if (job.data.step === 'charge') {
      await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
        job.data.orderId,
        'charge',
      ]);
      await job.updateData({ ...job.data, step: 'confirm' });
      await job.moveToDelayed(Date.now() + job.data.delayMs, token);
      throw new DelayedError();
    }
    await pool.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
      job.data.orderId,
      'confirm',
    ]);
    // The app's health check, as a probe reads it while this brief step runs.
    seen = await this.idempotency
      .isHealthy('idempotency', { maxUnfinishedAgeMs: MAX_UNFINISHED_AGE_MS })
      .catch((error: unknown) => error);
    return { confirmed: job.data.orderId };
  }
}

async function healthDuringSecondStep(orderId: string, delayMs: number) {
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      TerminusModule.forRoot({ logger: false }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: 'checks' }),
    ],
    providers: [Checks, IdempotencyHealthIndicator],
  })
  class AppModule {}
  const app: INestApplicationContext = await NestFactory.createApplicationContext(AppModule, {
    logger: [],
  });
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue('checks', { connection });
  const events = new QueueEvents('checks', { connection });
  try {
    await events.waitUntilReady();
    seen = undefined;
    const job = await queue.add('check', { orderId, step: 'charge', delayMs } satisfies CheckJob);
    const result = await job.waitUntilFinished(events, 30_000);
    const health = seen;
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM steps WHERE order_id = $1',
      [orderId],
    );
    return { result: result as unknown, steps: rows[0].n, health };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

/** The indicator's answer: its result when up, the error's cause when down. */
function verdict(health: unknown): unknown {
  const causes = (health as { causes?: unknown }).causes;
  return causes ?? health;
}

onRedis('adversary 78: health during a later step of a step job', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv78_health_step_age');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query(
      'CREATE TABLE steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: steps 0.2 s apart; health up during the second step', async () => {
    const run = await healthDuringSecondStep('near', 200);
    expect(run.result).toEqual({ confirmed: 'near' });
    expect(run.steps).toBe(2);
    expect(verdict(run.health)).toMatchObject({ idempotency: { status: 'up' } });
  }, 60_000);

  it('steps 4 s apart (over maxUnfinishedAgeMs): health up during the brief second step', async () => {
    const run = await healthDuringSecondStep('far', MAX_UNFINISHED_AGE_MS + 1_000);
    expect(run.result).toEqual({ confirmed: 'far' });
    expect(run.steps).toBe(2);
    // Fails: down, "a key has been unfinished for longer than 3000 ms (maxUnfinishedAgeMs):
    // its lease is still renewed: its work hangs", oldestUnfinishedAgeMs about 4000.
    expect(verdict(run.health)).toMatchObject({ idempotency: { status: 'up' } });
  }, 60_000);
});
