/**
 * Adversary 99: a NUL character in a job's tenant (its queue's name, or BullMQ `prefix`) makes
 * every claim fail in PostgreSQL ("invalid byte sequence for encoding UTF8: 0x00", SQLSTATE
 * 22021), which the library takes for a passing failure of the database: the job is moved to
 * the delayed set with no attempt counted, again and again, for ever. It never runs, never
 * fails, and its `attempts` never run out; nothing says why. The library refuses a NUL in a
 * job's key (lib/messages/message-id.ts `readMessageId`: "a NUL character fails every
 * statement that carries it ... so it was redelivered for ever") and in a namespace
 * (`namespaceProblem`: control characters), but not in the queue's name or prefix, which BullMQ
 * accepts (it refuses only `:` in a name) and Redis keeps (binary-safe keys).
 *
 * User code:
 *   const queue = `mail\u0000${region}`; // a name built from data, one NUL in it
 *   @Processor(queue) class Mails extends WorkerHost {
 *     @IdempotentJob() process(job) { ...INSERT... } }
 *   new Queue(queue, { connection }).add('mail', { parcelId: 1 }, { jobId: 'mail-1', attempts: 1 });
 *
 * Code path: lib/jobs/idempotent-jobs.service.ts `runOnce`: `jobKeyOf` (key checked: fine) →
 * `jobTenant(job.queueName, job.prefix, ...)` (lib/jobs/job-key.ts: no check of its
 * characters) → `tenantFits` (length only) → the claim's INSERT carries the tenant → 22021 →
 * taken for a database failing in passing → `moveToDelayed` (+1 s), no attempt counted; again
 * on each run.
 *
 * Docs quote (docs/guides/jobs.md, "Its key"): "1 to 255 characters, without NUL; a key that
 * is not fails the job at once, and so does a tenant over 255 characters, saying so"; "What
 * BullMQ sees": "meets a database that fails in passing as the library claims or commits it
 * (unreachable, a deadlock, a timeout) | moved to the delayed set, no attempt counted". A
 * statement that fails the same way on every run is not a database failing in passing.
 *
 * Severity: medium (a job loops in the delayed set for ever, a claim each second, with no
 * error anywhere; nothing runs twice).
 *
 * Fails now (un-skipped): after 8 s the job is `delayed`, attemptsMade 0, no failedReason
 * (it was delayed and re-run every second); expected it failed at once saying its queue's
 * tenant holds a NUL.
 *
 * Control: the same queue name without the NUL: the job completes.
 *
 * Suggested fix: check the tenant as the key is (`readMessageId`'s NUL and lone-surrogate
 * rules) before the claim, failing the job at once (`UnrecoverableError`, as
 * `JobQueueTenantTooLongError`), naming the queue; or classify 22021 (and other data errors of
 * the library's own statements) as final, not passing.
 *
 * Fixed (session of 2026-12-06, sixth): both. lib/jobs/job-key.ts `tenantProblem` (the shared
 * `unstorableTextProblem` of lib/decisions/well-formed.ts: a NUL, a lone surrogate) is checked
 * in `runOnce` before the claim, and a tenant PostgreSQL cannot hold fails the job at once
 * (`UnrecoverableError`) with `JobQueueTenantUnstorableError`, naming the tenant escaped and
 * the problem ("holds a NUL character"); `jobKeyOf` checks the job's own id the same way where a
 * key of the app's makes it only its steps' owner. And lib/connection/connection-errors.ts
 * takes 22021 and 22P05 of the library's own statements as permanent (`isPermanentError`: a 500
 * `database_permanent` over HTTP, an attempt for a job, never the delayed set), with
 * `permanentRemedy` saying which text to change.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

interface Mail {
  parcelId: number;
}

const connection = () => ({ host: '127.0.0.1', port: redis.port });

async function startMails(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
  class Mails extends WorkerHost {
    @IdempotentJob()
    async process(job: Job<Mail>) {
      const { rows } = await pool.query<{ id: number }>(
        'INSERT INTO mails (parcel_id) VALUES ($1) RETURNING id',
        [job.data.parcelId],
      );
      return { mail: rows[0].id };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: connection() }),
      BullModule.registerQueue({ name: 'mails-audit' }),
    ],
    providers: [Mails],
  })
  class MailsModule {}
  return NestFactory.createApplicationContext(MailsModule, { logger: [] });
}

/** Adds `mail-1` (one attempt) to `queueName`, waits up to 8 s, and says where it is. */
async function runMail(queueName: string) {
  const app = await startMails(queueName);
  const queue = new Queue<Mail>(queueName, { connection: connection() });
  try {
    await queue.add('mail', { parcelId: 1 }, { jobId: 'mail-1', attempts: 1 });
    let state = 'unknown';
    for (let waited = 0; waited < 8_000; waited += 200) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      const job = await queue.getJob('mail-1');
      state = job ? await job.getState() : 'gone';
      if (state === 'completed' || state === 'failed') break;
    }
    const job = await queue.getJob('mail-1');
    return { state, attemptsMade: job?.attemptsMade, failedReason: job?.failedReason };
  } finally {
    await queue.obliterate({ force: true });
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 99: a NUL in a queue name loops its jobs in the delayed set', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv99_nul_queue_name');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query('CREATE TABLE mails (id serial PRIMARY KEY, parcel_id int NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: the queue name without the NUL completes its job', async () => {
    expect(await runMail('mail-eu')).toMatchObject({ state: 'completed', attemptsMade: 1 });
  }, 60_000);

  it('a queue name with a NUL fails its job at once, saying so', async () => {
    const outcome = await runMail('mail\u0000eu');
    expect(outcome).toMatchObject({ state: 'failed', failedReason: expect.stringMatching(/NUL/) });
  }, 60_000);
});
