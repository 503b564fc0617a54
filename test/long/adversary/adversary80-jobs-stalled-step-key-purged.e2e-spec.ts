/**
 * Adversary 80: a step job whose worker died mid-step, and that BullMQ then failed for good as
 * stalled, has its key purged as abandoned (`abandonedKeyRetentionMs`, 30 days), phases and
 * claim id with it, where the same job failed for good by a throw keeps its key for ever: the
 * operator's `job.retry()` after the horizon runs the step again from nothing and calls the
 * PSP a SECOND time, under a new derived key (a charge captured twice).
 *
 * The user code: BullMQ's step idiom as jobs.md shows it (`updateData` with the next step,
 * `moveToDelayed`, `DelayedError`), keyed by the job's id; the step `capture` calls the PSP
 * through `PhaseRunner.call()` with its derived key; the worker with `maxStalledCount: 0` (a
 * stalled job is failed for the operator to look at, not run again unattended: BullMQ's
 * setting for jobs that must not run twice); the purge running (`purgeIntervalMs`, here
 * `IdempotencyPurger.purgeExpired()` with `abandonedKeyRetentionMs` 1 s standing for 30 days).
 * Worker processes of their own (test/support/adv80-step-worker.ts), the first SIGKILLed just
 * after the PSP call; the operator retries the failed job (`job.retry()`, a board's "retry").
 *
 * Why it breaks: lib/claim/postgres-statements.ts PURGE_ABANDONED_BATCH exempts a step job's
 * key only as NOT_PARKED_BY_STEP, "`locked_until IS NULL AND phase_results ? 'bullmq:step'`":
 * a key its job parked on purpose. The key of a step job whose worker died mid-step keeps its
 * expired lease (`locked_until` in the past, never NULL: no run of it released it), its step
 * owner and its phases on the row, and is deleted once `abandonedKeyRetentionMs` passed, though
 * BullMQ still holds the job (failed, to be retried). The retry claims a fresh key (new claim
 * id): `PhaseRunner` has no `psp_captured` result, and calls the PSP again with another key.
 * The same job failed for good by a throw (attempts spent) has its key released
 * (`locked_until` NULL): it is kept for ever, and its retry goes on after the phase (control).
 *
 * The docs it contradicts: docs/guides/jobs.md, "Limits": "A job whose steps hold its key and
 * that then fails for good leaves its key unfinished and its own [...]. Fix the fault and retry
 * the failed job (BullMQ's `job.retry()`, or your board's): it goes on from its step";
 * "Operations": "nor does the purge take its key for abandoned, however long its delay";
 * docs/operations/retention.md: a step job's key "is not abandoned and is never purged [...]:
 * BullMQ brings the job back, and its next run goes on under the same claim"; phases.md/jobs.md:
 * "a job taken over after its worker died resumes after its last completed phase, and the
 * external system sees the same key".
 *
 * Severity: medium-low (a worker killed mid-step, the job failed as stalled (maxStalledCount 0,
 * or a second stall under BullMQ's default 1), and retried after the 30 days; then the PSP is
 * called twice, under two keys: a double capture). A plain job with phases failed as stalled
 * meets the same purge (not tried here: the docs exempt only a step job's key); health and
 * `doctor` count the stalled step job's key as stuck meanwhile (its lease ran out), up to 30 days.
 *
 * Fails now: two PSP calls for the order, under two idempotency keys.
 *
 * Control: the same job failing for good by a throw after the PSP call (its key released), the
 * same purge, the same retry: one PSP call, the capture written.
 *
 * Suggested fix: exempt from the abandoned purge every key that holds a step owner
 * (`phase_results ? 'bullmq:step'`), whatever its lease: BullMQ may hold its job failed (for
 * the operator's retry) or stalled as it holds it delayed; a key whose job is gone is the
 * operator's (`keys list --tenant bullmq:`), as retention.md says for a job removed between its
 * steps. Or, more generally, exempt any `bullmq:` key with phases from the abandoned purge until
 * its job is gone from BullMQ.
 *
 * Fixed: the abandoned purge (lib/claim/postgres-statements.ts PURGE_ABANDONED_BATCH v4, and
 * lib/claim/partitioned/partitioned-statements.ts PURGE_ABANDONED_IN_PARTITIONS v3) spares
 * every key holding a step owner (`HOLDS_NO_JOB_STEPS`), whatever its lease; health and
 * `doctor` still count the stalled one stuck (retention.md, jobs.md say so).
 */
import { Queue } from 'bullmq';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotencyPurger } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { type ReadyProcess, startReadyProcess } from '../../support/ready-process.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let database: MigratedDatabase;
let redis: TestRedis;
let pool: Pool;
const workers: ReadyProcess[] = [];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = await probe();
    if (found !== undefined) return found;
    if (Date.now() > deadline) {
      throw new Error(`timed out: ${what}\n${workers.map((w) => w.output()).join('\n---\n')}`);
    }
    await sleep(100);
  }
}

function startWorker(name: string, env: Record<string, string> = {}) {
  return startReadyProcess(
    'test/support/adv80-step-worker.js',
    { DATABASE_URL: database.url, REDIS_PORT: String(redis.port), WORKER: name, ...env },
    name,
  ).then((worker) => {
    workers.push(worker);
    return worker;
  });
}

/** The purge as the app runs it, with `abandonedKeyRetentionMs` 1 s standing for 30 days. */
async function purgeAbandoned() {
  @Module({
    imports: [
      IdempotencyModule.forRoot({
        globalKeys: true,
        pool,
        retentionMs: 1_000,
        abandonedKeyRetentionMs: 1_000,
      }),
    ],
  })
  class PurgeModule {}
  const app = await NestFactory.createApplicationContext(PurgeModule, { logger: ['error'] });
  try {
    await app.get(IdempotencyPurger).purgeExpired();
  } finally {
    await app.close();
  }
}

/**
 * A charge job whose first worker is stopped in its `capture` step after the PSP call (`how`:
 * SIGKILLed, and BullMQ fails the job as stalled; or the step throws, the job's one attempt
 * spent), then the purge past the horizon, then the operator's retry on a second worker.
 */
async function chargeStoppedThenRetried(how: 'killed' | 'threw', orderId: string) {
  const queue = new Queue('charges', { connection: { host: '127.0.0.1', port: redis.port } });
  try {
    const first = await startWorker(`first-${orderId}`, {
      [how === 'killed' ? 'DIE_AFTER_CALL' : 'FAIL_AFTER_CALL']: '1',
    });
    const job = await queue.add('charge', { orderId, step: 'reserve' }, { attempts: 1 });
    if (how === 'killed') {
      await until('the PSP call', async () =>
        first.output().includes('called') ? true : undefined,
      );
      await first.kill();
    } else {
      await until('the failed job', async () =>
        (await queue.getJobState(job.id!)) === 'failed' ? true : undefined,
      );
      await first.kill();
    }
    // The second worker: its stalled check fails the killed job (maxStalledCount 0).
    await startWorker(`second-${orderId}`);
    const reason = await until('the failed job', async () => {
      const found = await queue.getJob(job.id!);
      return (await found?.getState()) === 'failed' ? found!.failedReason : undefined;
    });
    // The key's lease out (its worker gone), past the abandoned horizon; then the purge.
    await until('a key with its lease out', async () => {
      const { rows } = await pool.query(
        `SELECT 1 FROM idempotency_keys WHERE tenant_id = 'bullmq:charges' AND key = $1
          AND (locked_until IS NULL OR locked_until < clock_timestamp())
          AND created_at < now() - interval '1500 milliseconds'`,
        [`${job.id}@${job.timestamp}`],
      );
      return rows.length > 0 ? true : undefined;
    });
    await purgeAbandoned();
    // The operator fixes the fault and retries the failed job.
    await (await queue.getJob(job.id!))!.retry('failed');
    await until('the retried job completed', async () =>
      (await queue.getJobState(job.id!)) === 'completed' ? true : undefined,
    );
    const calls = await pool.query<{ idempotency_key: string }>(
      'SELECT idempotency_key FROM psp_calls WHERE order_id = $1 ORDER BY id',
      [orderId],
    );
    const captures = await pool.query('SELECT 1 FROM captures WHERE order_id = $1', [orderId]);
    return {
      reason,
      calls: calls.rows.map((row) => row.idempotency_key),
      captures: captures.rowCount,
    };
  } finally {
    await queue.close();
    for (const worker of workers.splice(0)) await worker.kill();
  }
}

describe('adversary 80: a step job failed as stalled, its key past the abandoned horizon', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv80_stalled_step');
    redis = await startTestRedis();
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE reservations (id serial PRIMARY KEY, order_id text NOT NULL)');
    await pool.query('CREATE TABLE captures (id serial PRIMARY KEY, order_id text NOT NULL)');
    await pool.query(
      `CREATE TABLE psp_calls (id serial PRIMARY KEY, order_id text NOT NULL,
         idempotency_key text NOT NULL, worker text NOT NULL)`,
    );
  }, 120_000);

  afterAll(async () => {
    for (const worker of workers.splice(0)) await worker.kill();
    await pool?.end();
    await redis?.stop();
    await database?.drop();
  });

  it('control: failed for good by a throw after the PSP call; the retry after the purge calls it once', async () => {
    const { reason, calls, captures } = await chargeStoppedThenRetried('threw', 'order-threw');
    expect(reason).toContain('the ledger refused the capture');
    expect(calls).toHaveLength(1);
    expect(captures).toBe(1);
  }, 120_000);

  it('failed as stalled (its worker killed) after the PSP call; the retry after the purge calls it once', async () => {
    const { reason, calls, captures } = await chargeStoppedThenRetried('killed', 'order-killed');
    expect(reason).toContain('stalled');
    // Fails: two calls, under two idempotency keys: the capture was made twice.
    expect(calls).toHaveLength(1);
    expect(captures).toBe(1);
  }, 120_000);
});
