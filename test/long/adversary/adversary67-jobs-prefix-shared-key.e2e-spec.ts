/**
 * Adversary 67: two BullMQ queues of the same name under different prefixes (BullMQ's
 * `prefix` option, its way to keep apart the queues of two services, tenants or environments
 * on one Redis) share their jobs' keys: a job of one is "completed" with the result of the
 * other's job of the same id, and never runs. Silently: the data is not compared.
 *
 * The app: two worker services on one Redis and one PostgreSQL database (or one app that
 * gives each tenant its queues under a prefix of its own): each with `BullModule.forRoot({
 * connection, prefix: 'svc-a' | 'svc-b' })`, a queue `emails`, and an `@IdempotentJob()`
 * processor that records the mail it sends (a row naming its service) and returns its id.
 * Each service adds the welcome mail of its user 42 with its own job id, `welcome-42`
 * (the guide's "an id of the app's own (`jobId` when it adds the job) is the job").
 *
 * What happens: the key's tenant is `bullmq:<queue>` from `job.queueName`
 * (lib/jobs/idempotent-jobs.service.ts `runOnce`, lib/jobs/job-key.ts `jobTenant`), the
 * queue's bare name: BullMQ's queue is its prefix and its name (`job.queueQualifiedName`,
 * `svc-b:emails`), the library's is the name alone. The key is `welcome-42` (`opts.jobId`),
 * and for an own id the data is not compared (the fingerprint is the queue and the job's
 * name). Service B's job claims `bullmq:emails` / `welcome-42`, finds service A's done, and is
 * completed with A's result: B's user never gets the mail; B's returnvalue is A's.
 *
 * Expected (docs/guides/jobs.md, "Its key"): "Keys are kept per queue (`bullmq:<queue>` is
 * their tenant)": per queue, and a queue under another prefix is another queue (BullMQ keeps
 * its jobs, ids and counters apart). Each service's job runs once.
 *
 * Controls: the same two services without the library (both mails sent); with it, queues of
 * two names (both sent).
 *
 * Severity: medium (a job never run and told done with another service's result, silently;
 * needs one queue name and one job id under two prefixes on one database).
 *
 * Fixed: a job's tenant carries its queue's prefix where it is not BullMQ's default
 * (`bullmq:<prefix>:<queue>`, `jobTenant` in lib/jobs/job-key.ts).
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

interface Welcome {
  userId: number;
}

async function send(service: string, job: Job<Welcome>) {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO mails (service, user_id) VALUES ($1, $2) RETURNING id',
    [service, job.data.userId],
  );
  return { service, mail: rows[0].id };
}

/** A worker service: its own prefix, a queue `queue`, its processor decorated or not. */
async function startService(
  service: string,
  prefix: string,
  queue: string,
  idempotent: boolean,
): Promise<INestApplicationContext> {
  @Processor(queue)
  class Plain extends WorkerHost {
    process(job: Job<Welcome>) {
      return send(service, job);
    }
  }
  @Processor(queue)
  class Decorated extends WorkerHost {
    @IdempotentJob()
    process(job: Job<Welcome>) {
      return send(service, job);
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port }, prefix }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [idempotent ? Decorated : Plain],
  })
  class ServiceModule {}
  return NestFactory.createApplicationContext(ServiceModule, { logger: [] });
}

/** Service `service` adds its welcome mail `welcome-42` and waits for it. */
async function welcome(prefix: string, queueName: string) {
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue<Welcome>(queueName, { connection, prefix });
  const events = new QueueEvents(queueName, { connection, prefix });
  try {
    await events.waitUntilReady();
    const job = await queue.add('welcome', { userId: 42 }, { jobId: 'welcome-42' });
    return (await job.waitUntilFinished(events, 15_000)) as { service: string };
  } finally {
    await events.close();
    await queue.close();
  }
}

/** Both services send user 42's welcome mail, A then B; what each job returned, the mails. */
async function bothServices(run: string, idempotent: boolean, sameQueue: boolean) {
  const queueA = `emails-${run}`;
  const queueB = sameQueue ? queueA : `${queueA}-b`;
  const a = await startService('a', `svc-a-${run}`, queueA, idempotent);
  const b = await startService('b', `svc-b-${run}`, queueB, idempotent);
  try {
    const first = await welcome(`svc-a-${run}`, queueA);
    const second = await welcome(`svc-b-${run}`, queueB);
    const { rows } = await pool.query<{ service: string }>(
      'SELECT service FROM mails WHERE run = $1 ORDER BY id',
      [run],
    );
    return { a: first.service, b: second.service, mails: rows.map((row) => row.service) };
  } finally {
    await a.close();
    await b.close();
  }
}

const bothSent = { a: 'a', b: 'b', mails: ['a', 'b'] };

onRedis('adversary 67: one queue name under two BullMQ prefixes', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv67_prefix');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query(
      `CREATE TABLE mails (id serial PRIMARY KEY, service text NOT NULL, user_id int NOT NULL,
         run text NOT NULL DEFAULT '')`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  /** The run's name, set as the database's default for its mails' `run` column. */
  async function named(name: string) {
    await pool.query(`ALTER TABLE mails ALTER COLUMN run SET DEFAULT '${name}'`);
    return name;
  }

  it('control: without the library, each service sends its mail', async () => {
    expect(await bothServices(await named('plain'), false, true)).toEqual(bothSent);
  }, 60_000);

  it('control: with it, queues of two names, each sends its mail', async () => {
    expect(await bothServices(await named('names'), true, false)).toEqual(bothSent);
  }, 60_000);

  it("with it, one queue name under two prefixes: B's job runs, not A's result", async () => {
    // Fails: B's job completed with { service: 'a', ... } (A's result), and B sent no mail:
    // mails ['a'].
    expect(await bothServices(await named('prefixes'), true, true)).toEqual(bothSent);
  }, 60_000);
});
