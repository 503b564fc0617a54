/**
 * Adversary 78: the purge deletes the key of a job that is between its steps (delayed by
 * itself, BullMQ bringing it back on schedule) once its first step is older than
 * `abandonedKeyRetentionMs`, as if its client had given up; the job's next run starts over
 * under a new claim: its `PhaseRunner` call out is made AGAIN, with a new derived key, so the
 * PSP sees two requests and refunds twice.
 *
 * The user code: the docs' keyed processor (docs/guides/jobs.md, "Calls out: PhaseRunner")
 * with BullMQ's step idiom: each run calls the PSP through `phases.call('psp_refunded', …)`
 * (replayed from the key on the job's later runs, "its completed phases kept"), then its first
 * step writes its row, saves the next step (`updateData`), moves itself to the delayed set
 * (`moveToDelayed(now + delay, token)`, `DelayedError`: "notify the customer when the refund
 * settles", "renew when the trial ends"), and its second step writes its row and returns. The
 * purge runs as the docs set it up (`purgeIntervalMs`, or `IdempotencyPurger.purgeExpired()`
 * from a job of the app's own). The test stands the delay (30 days and more with the default
 * `abandonedKeyRetentionMs`; a day with `abandonedKeyRetentionMs: retentionMs` of 24 h, which
 * the options allow) for 4 s, with both retentions at 1 s, and runs the purge during it.
 *
 * Why it breaks: lib/claim/postgres-statements.ts `PURGE_ABANDONED_BATCH` deletes every key
 * `state = 'started'` created before `abandonedKeyRetentionMs` whose lease is NULL or ran out.
 * A job's key between its steps is exactly that: started, its lease ended on purpose (the
 * step's RELEASE_JOB_STEP, lib/jobs/idempotent-jobs.service.ts), its completed phases, its
 * claim id (the base of the derived keys) and its step owner on the row. Once deleted, the
 * job's next run claims a new key (new claim id), `phases.call('psp_refunded')` finds no
 * kept result and calls the PSP with `<new claim id>:psp_refunded`. Another job of a derived
 * key (the refund requested twice) would likewise no longer wait and would run it all.
 *
 * The docs it contradicts: docs/guides/jobs.md, "What BullMQ sees": a job that moves itself
 * and throws `DelayedError` … "its key stays unfinished and named the job's, and its next run
 * goes on (its completed phases kept)"; "Calls out": "the external system sees the same key";
 * docs/operations/retention.md: the abandoned keys are those "left unfinished" whose client
 * gave up, and deleting them "would let a late retry start over under a new derived key, so the
 * PSP would charge twice" — a job between its steps is not abandoned: BullMQ brings it back.
 * ("a job between its steps … is not stuck", "Operations".)
 *
 * Severity: medium (the external call made twice under two keys, what the library exists to
 * prevent; it takes a step delay, or a wait for children, longer than
 * `abandonedKeyRetentionMs`: 30 days by default, shorter where an app sets it down toward its
 * retentionMs).
 *
 * Fails now: the PSP is called twice, `<claim A>:psp_refunded` then `<claim B>:psp_refunded`
 * (the job completes; its second run's phase was not replayed).
 *
 * Control: the same job, the purge run during the same delay, with the default
 * `abandonedKeyRetentionMs` (30 days): one PSP call, one key.
 *
 * Suggested fix: the abandoned-key purge leaves alone a key held by a job between its steps
 * (its step owner on the row: `phase_results ? 'bullmq:step'`, or a column saying the key is
 * parked by a step), or purges them only after a horizon of their own; at least, the docs of
 * `abandonedKeyRetentionMs` and the jobs guide say that a step job must come back within it.
 *
 * Fixed: the abandoned keys' purge leaves a key parked by a job between its steps (lease NULL,
 * its step owner `bullmq:step` on the row): lib/claim/postgres-statements.ts
 * `NOT_PARKED_BY_STEP` in PURGE_ABANDONED_BATCH (v3) and, for partitioned expiry,
 * lib/claim/partitioned/partitioned-statements.ts PURGE_ABANDONED_IN_PARTITIONS (v2);
 * docs/operations/retention.md and docs/guides/jobs.md say so (a job removed from BullMQ
 * between its steps leaves its key for the operator).
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { DelayedError, type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import {
  IdempotencyModule,
  IdempotencyPurger,
  IdempotentJob,
  PhaseRunner,
} from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

const STEP_DELAY_MS = 4_000;

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;
/** The PSP's refund requests, by the idempotency key each carried. */
const pspCalls: string[] = [];

interface RefundJob {
  refundId: string;
  step: 'refund' | 'notify';
}

async function startApp(queue: string, retention: object): Promise<INestApplicationContext> {
  @Processor(queue)
  class Refunds extends WorkerHost {
    constructor(private readonly phases: PhaseRunner) {
      super();
    }

    @IdempotentJob({
      key: (job) => (job.data as RefundJob).refundId,
      fingerprint: (job) => ({ refundId: (job.data as RefundJob).refundId }),
    })
    async process(job: Job<RefundJob>, token?: string) {
      // The PSP refund, once per refund: replayed from the key on the job's later runs.
      const refund = await this.phases.call('psp_refunded', ({ idempotencyKey }) => {
        pspCalls.push(idempotencyKey);
        return Promise.resolve({ pspRefundId: `psp-${job.data.refundId}` });
      });
      if (job.data.step === 'refund') {
        await pool.query('INSERT INTO steps (refund_id, step) VALUES ($1, $2)', [
          job.data.refundId,
          'refund',
        ]);
        await job.updateData({ ...job.data, step: 'notify' });
        await job.moveToDelayed(Date.now() + STEP_DELAY_MS, token);
        throw new DelayedError();
      }
      await pool.query('INSERT INTO steps (refund_id, step) VALUES ($1, $2)', [
        job.data.refundId,
        'notify',
      ]);
      return refund;
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool, ...retention }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [Refunds],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

/** The job run with the purge run between its steps, under `retention`. */
async function refundWithPurgeBetweenSteps(queueName: string, retention: object) {
  pspCalls.length = 0;
  const app = await startApp(queueName, retention);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const refundId = `${queueName}-r1`;
    const job = await queue.add('refund', { refundId, step: 'refund' } satisfies RefundJob);
    // Between its steps (delayed by itself), older than 1 s: the purge runs.
    const until = Date.now() + 15_000;
    while ((await job.getState()) !== 'delayed' && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const state = await job.getState();
    await app.get(IdempotencyPurger).purgeExpired();
    const result = await job.waitUntilFinished(events, 30_000);
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM steps WHERE refund_id = $1 ORDER BY id',
      [refundId],
    );
    return {
      stateAtPurge: state,
      result: result as unknown,
      steps: rows.map((row) => row.step),
      pspCalls: [...pspCalls],
    };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 78: the purge and a job between its steps', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv78_step_key_purged');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query(
      'CREATE TABLE steps (id serial PRIMARY KEY, refund_id text NOT NULL, step text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: the default abandonedKeyRetentionMs; one PSP call, one key', async () => {
    const run = await refundWithPurgeBetweenSteps('kept', {});
    expect(run.stateAtPurge).toBe('delayed');
    expect(run.result).toEqual({ pspRefundId: 'psp-kept-r1' });
    expect(run.steps).toEqual(['refund', 'notify']);
    expect(run.pspCalls).toHaveLength(1);
  }, 60_000);

  // Fixed (round 78 fixer)
  it('its first step older than abandonedKeyRetentionMs: still one PSP call, one key', async () => {
    const run = await refundWithPurgeBetweenSteps('purged', {
      retentionMs: 1_000,
      abandonedKeyRetentionMs: 1_000,
    });
    expect(run.stateAtPurge).toBe('delayed');
    expect(run.result).toEqual({ pspRefundId: 'psp-purged-r1' });
    expect(run.steps).toEqual(['refund', 'notify']);
    // Fails: two calls, '<claim A>:psp_refunded' and '<claim B>:psp_refunded': the key (its
    // phases, its claim id) was purged as abandoned between the steps.
    expect(run.pspCalls).toHaveLength(1);
  }, 60_000);
});
