/**
 * Adversary 99: a job's tenant is measured in UTF-16 code units, the keys table in characters.
 * lib/jobs/job-key.ts `tenantFits` (and `queueNameRoom`) count `tenant.length`, JavaScript's
 * UTF-16 code units, while the table's CHECK (`length(tenant_id) BETWEEN 1 AND 255`) counts
 * characters (code points). A queue named with characters outside the Basic Multilingual Plane
 * (emoji, CJK Extension B ideographs, historic scripts: each two code units) is refused with
 * `JobQueueTenantTooLongError` although its tenant is well under 255 characters and PostgreSQL
 * would keep it; the error then tells the user the name "may be N characters at most there, not
 * M" with both numbers in code units (M is twice the characters they typed).
 *
 * User code:
 *   const queue = '📦'.repeat(130) + '-a'; // 132 characters, a legal BullMQ queue name
 *   @Processor(queue) class Parcels extends WorkerHost {
 *     @IdempotentJob() process(job) { ...INSERT the parcel... } }
 *   new Queue(queue, { connection }).add('parcel', { parcelId: 1 }, { jobId: 'parcel-1' });
 *
 * Code path: lib/jobs/idempotent-jobs.service.ts `runOnce` → `tenantFits(scope.tenantId)`
 * (lib/jobs/job-key.ts: `tenant.length <= MAX_TENANT_ID_LENGTH`) → false for
 * `bullmq:📦…📦-a` (139 characters, 269 code units) → `JobQueueTenantTooLongError`
 * (lib/jobs/job-errors.ts, its room from `queueNameRoom`, also code units). Same count in
 * lib/messages/message-id.ts `readMessageId` (`value.length > 255`) for the job's key.
 *
 * Docs quote (docs/guides/jobs.md, "Its key"): "1 to 255 characters, without NUL; a key that is
 * not fails the job at once, and so does a tenant over 255 characters, saying so and how long
 * the queue's name may be there (`JobQueueTenantTooLongError`). ... a queue name may be 248
 * characters on database 0 of Redis under BullMQ's own prefix with no namespace".
 *
 * Severity: low (a job the table could record fails for good, and the error's numbers are not
 * the characters the user counts; nothing runs twice).
 *
 * Fails now (un-skipped): the job fails: "JobQueueTenantTooLongError ... (bullmq:📦…, 269
 * characters ...) is over 255 characters; its queue name may be 248 characters at most there,
 * not 262", expected it completes (its tenant is 139 characters). The message's
 * `tenant.slice(0, 40)` also cuts a surrogate pair in two: a lone surrogate (U+FFFD as shown).
 *
 * Control: an ASCII queue name of the same 132 characters: the job completes.
 *
 * Suggested fix: count code points (`[...tenant].length`, as PostgreSQL's `length()`) in
 * `tenantFits`, `queueNameRoom` and the error's numbers (and in `readMessageId`'s 255 for keys,
 * the namespace's 100); or say in jobs.md that the limits count UTF-16 code units.
 *
 * Fixed (session of 2026-12-06, sixth): lib/decisions/well-formed.ts `characterCount` counts
 * code points, as PostgreSQL's `length()`; every limit that mirrors a CHECK on a length counts
 * with it: `tenantFits`, `queueNameRoom` and `JobQueueTenantTooLongError`'s numbers, the
 * namespace's 100 (`namespaceProblem`), `readMessageId`'s 255 (a job's key, a message's id),
 * `readTenantId`'s 255, the HTTP and GraphQL key's 255, a task's tenant and
 * `processOnce`'s consumer and message id. Previews (`JobQueueTenantTooLongError`'s 40,
 * `previewMessageId`'s 60) are cut by `firstCharacters`, never inside a surrogate pair.
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

interface Parcel {
  parcelId: number;
}

const connection = () => ({ host: '127.0.0.1', port: redis.port });

async function startParcels(queue: string): Promise<INestApplicationContext> {
  @Processor(queue)
  class Parcels extends WorkerHost {
    @IdempotentJob()
    async process(job: Job<Parcel>) {
      const { rows } = await pool.query<{ id: number }>(
        'INSERT INTO parcels (queue, parcel_id) VALUES ($1, $2) RETURNING id',
        [queue, job.data.parcelId],
      );
      return { parcel: rows[0].id };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: connection() }),
      BullModule.registerQueue({ name: 'parcels-audit' }),
    ],
    providers: [Parcels],
  })
  class ParcelsModule {}
  return NestFactory.createApplicationContext(ParcelsModule, { logger: [] });
}

/** Adds `parcel-1` to `queueName` and says how it ended: its result, or its failure's words. */
async function runParcel(queueName: string) {
  const app = await startParcels(queueName);
  const queue = new Queue<Parcel>(queueName, { connection: connection() });
  const events = new QueueEvents(queueName, { connection: connection() });
  try {
    await events.waitUntilReady();
    const job = await queue.add(
      'parcel',
      { parcelId: 1 },
      { jobId: 'parcel-1', attempts: 1, removeOnFail: false },
    );
    try {
      const result = (await job.waitUntilFinished(events, 15_000)) as { parcel: number };
      return { completed: typeof result.parcel === 'number' };
    } catch (error) {
      return { failed: (error as Error).message };
    }
  } finally {
    await events.close();
    await queue.obliterate({ force: true });
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 99: a queue name outside the BMP is measured in code units', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv99_astral_queue_name');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query(
      'CREATE TABLE parcels (id serial PRIMARY KEY, queue text NOT NULL, parcel_id int NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: an ASCII queue name of 132 characters records its job', async () => {
    const queue = 'p'.repeat(130) + '-a';
    expect(await runParcel(queue)).toEqual({ completed: true });
    const { rows } = await pool.query<{ length: number }>(
      'SELECT length(tenant_id) AS length FROM idempotency_keys WHERE key = $1',
      ['parcel-1'],
    );
    expect(rows).toEqual([{ length: 7 + 132 }]);
  }, 60_000);

  it('a queue name of 132 emoji-bearing characters (a 139-character tenant) records its job', async () => {
    const queue = '📦'.repeat(130) + '-a';
    expect([...`bullmq:${queue}`].length).toBe(139);
    expect(await runParcel(queue)).toEqual({ completed: true });
  }, 60_000);
});
