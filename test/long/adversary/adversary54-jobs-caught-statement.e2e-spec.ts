/**
 * What the app does: an `@IdempotentJob()` processor (attempts: 3) writes its audit row, then
 * inserts a row that may already exist, catches the unique violation ("already there") and
 * returns. Without the library each statement commits alone and the job completes.
 *
 * What happens: PostgreSQL aborted the job's transaction at the failed statement, so nothing
 * can commit (as docs/guides/transactions.md says for a route: "500 transaction_aborted |
 * nothing | runs it again"). The job is then failed at once (`UnrecoverableError`), its other
 * attempts unused, its reason "the job's kept answer is the library's refusal: ..." while
 * nothing was kept: lib/jobs/idempotent-jobs.service.ts:243-252 hands a 500 that was not
 * stored to `resultOf` (`JobAnswerRefusedError`, a `JobRefusedError`: lib/jobs/job-failure.ts:
 * 27-28 `fail`). The guide's table lists no such case: it fails for good only a mismatched
 * key, an unkeepable key or an unwritable result; a job's own fault keeps BullMQ's attempts.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): nothing committed, the job's attempts
 * kept ("its own error, as without the library (attempts, backoff, the failed set)") and its
 * reason not a claim that an answer was kept.
 *
 * Control: the same processor when the row is new completes (one audit row).
 *
 * Severity: low (a job fails for good with a false reason and its attempts unused; nothing
 * twice, nothing told done).
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import {
  redisServerInstalled,
  startTestRedis,
  type TestRedis,
} from '../../support/redis-server.js';

const onRedis = redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;
let app: INestApplicationContext;
const QUEUE = 'members';

@Processor(QUEUE)
class MembersProcessor extends WorkerHost {
  @IdempotentJob()
  async process(job: Job<{ email: string }>) {
    await pool.query('INSERT INTO audit (email) VALUES ($1)', [job.data.email]);
    try {
      await pool.query('INSERT INTO members (email) VALUES ($1)', [job.data.email]);
    } catch {
      return { already: true };
    }
    return { added: true };
  }
}

async function run(email: string) {
  const queue = new Queue(QUEUE, { connection: { port: redis.port } });
  const events = new QueueEvents(QUEUE, { connection: { port: redis.port } });
  try {
    await events.waitUntilReady();
    const added = await queue.add('member', { email }, { attempts: 3 });
    const outcome = await added.waitUntilFinished(events, 20_000).then(
      (value: unknown) => ({ completed: value }),
      (error: Error) => ({ failed: error.message }),
    );
    const job = (await queue.getJob(added.id!))!;
    return { outcome, attemptsMade: job.attemptsMade };
  } finally {
    await events.close();
    await queue.close();
  }
}

onRedis('adversary 54: a job that catches a failed statement and goes on', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv54_caught_statement');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE audit (email text NOT NULL)');
    await pool.query('CREATE TABLE members (email text PRIMARY KEY)');
    await pool.query(`INSERT INTO members VALUES ('old@example.com')`);
    @Module({
      imports: [
        IdempotencyModule.forRoot({ globalKeys: true, pool }),
        BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
        BullModule.registerQueue({ name: QUEUE }),
      ],
      providers: [MembersProcessor],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: a new member completes', async () => {
    expect(await run('new@example.com')).toEqual({
      outcome: { completed: { added: true } },
      attemptsMade: 1,
    });
  }, 60_000);

  it('a member already there: its attempts kept, no "kept answer" reason', async () => {
    const { outcome, attemptsMade } = await run('old@example.com');
    // Fails: failed after 1 attempt of 3, "the job's kept answer is the library's refusal".
    expect({ attemptsMade, keptSaid: JSON.stringify(outcome).includes('kept answer') }).toEqual({
      attemptsMade: 3,
      keptSaid: false,
    });
  }, 60_000);
});
