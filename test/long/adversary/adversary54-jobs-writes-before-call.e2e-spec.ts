/**
 * What the app does: an `@IdempotentJob()` processor writes its refund row (in the job's
 * transaction), then calls the PSP through `PhaseRunner.call()`, as docs/guides/jobs.md
 * describes it: "`call()` commits the job's record (and the writes so far) before the call,
 * with no transaction held across it".
 *
 * What happens: `call()` refuses (`PhaseOrderError`, "phase ... started after the request's
 * transaction began", lib/phases/phase-runner.service.ts:123) on every attempt: the job fails
 * with it, and fails again on its retry; the PSP is never called and the row never kept. The
 * guide promises what the phase machinery refuses (docs/guides/phases.md has phases first).
 *
 * Expected (docs/guides/jobs.md, "Calls out: PhaseRunner"): the row written so far commits
 * with the record, the call runs with the derived key, and the job completes; or the guide
 * says a job's writes must come after its phases.
 *
 * Control: the same job with the call first and the write after it completes (row and call
 * once).
 *
 * Severity: medium (every job written as the guide says fails; nothing runs twice).
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob, PhaseRunner } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import {
  redisServerInstalled,
  startTestRedis,
  type TestRedis,
} from '../../support/redis-server.js';

const onRedis = redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;

interface Refund {
  refundId: string;
  cents: number;
}

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;
const pspCalls: string[] = [];

async function psp(idempotencyKey: string): Promise<{ id: string }> {
  pspCalls.push(idempotencyKey);
  return Promise.resolve({ id: `re_${pspCalls.length}` });
}

async function startApp(queue: string, writeFirst: boolean): Promise<INestApplicationContext> {
  @Processor(queue)
  class RefundsProcessor extends WorkerHost {
    constructor(private readonly phases: PhaseRunner) {
      super();
    }

    @IdempotentJob()
    async process(job: Job<Refund>) {
      const write = () =>
        pool.query('INSERT INTO refunds (refund_id, cents) VALUES ($1, $2)', [
          job.data.refundId,
          job.data.cents,
        ]);
      if (writeFirst) await write();
      const refund = await this.phases.call('psp_refunded', ({ idempotencyKey }) =>
        psp(idempotencyKey),
      );
      if (!writeFirst) await write();
      return { pspRefundId: refund.id };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [RefundsProcessor],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
}

async function runJob(queueName: string, writeFirst: boolean) {
  pspCalls.length = 0;
  const app = await startApp(queueName, writeFirst);
  const queue = new Queue(queueName, { connection: { port: redis.port } });
  const events = new QueueEvents(queueName, { connection: { port: redis.port } });
  try {
    await events.waitUntilReady();
    const job = await queue.add(
      'refund',
      { refundId: queueName, cents: 700 },
      { attempts: 2, backoff: { type: 'fixed', delay: 100 } },
    );
    const outcome = await job.waitUntilFinished(events, 20_000).then(
      (value: unknown) => ({ completed: value }),
      (error: Error) => ({ failed: error.message }),
    );
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM refunds WHERE refund_id = $1',
      [queueName],
    );
    return { outcome, rows: rows[0]!.n, pspCalls: pspCalls.length };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 54: a job that writes, then calls out through PhaseRunner', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv54_writes_before_call');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE refunds (refund_id text NOT NULL, cents int NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: the call first, then the write: completes, row and call once', async () => {
    expect(await runJob('call-first', false)).toEqual({
      outcome: { completed: { pspRefundId: 're_1' } },
      rows: 1,
      pspCalls: 1,
    });
  }, 60_000);

  it('the write, then the call: refused as the guide now says, nothing written, nothing called', async () => {
    // Failed against the guide's first words ("and the writes so far"): a phase starts before
    // the job's first write of its own, as on a route (phases.md); the guide says so now, and
    // the refusal names the phase and why, on each of the job's attempts.
    expect(await runJob('write-first', true)).toEqual({
      outcome: {
        failed: expect.stringContaining(
          'phase "psp_refunded" started after the request\'s transaction began',
        ) as string,
      },
      rows: 0,
      pspCalls: 0,
    });
  }, 60_000);
});
