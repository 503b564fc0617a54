/**
 * Fixed (session of 2026-12-06 fourth): a job's tenant carries its worker's Redis database where
 * it is not 0 (lib/jobs/job-key.ts `jobTenant`, `redisDbOf`: `bullmq:<queue>:db<n>:`, under a
 * prefix `bullmq:<prefix>:<queue>:db<n>:`), so one queue name on two databases is two queues'
 * keys; database 0's tenants are as they were. Two Redis servers are not told apart (a host
 * changes on failover): jobs.md says they need prefixes of their own.
 *
 * Adversary 90: two BullMQ queues of the same name on two Redis databases (the `db` index of
 * the connection, Redis' own way to keep apart two services or environments on one server; or
 * two Redis servers) share their jobs' keys when they share one PostgreSQL database: a job of
 * one is "completed" with the result of the other's job of the same id, and never runs.
 * Silently: for an id of the app's own the data is not compared. Adversary 67's fix told
 * queues apart by BullMQ's `prefix`; the connection's `db` (or host) is the other half of
 * what makes a BullMQ queue, and it is not in the key.
 *
 * User code: two worker services on one Redis server and one PostgreSQL database, each with
 * `BullModule.forRoot({ connection: { host, port, db: 1 | 2 } })` (no prefix of their own), a
 * queue `emails`, and an `@IdempotentJob()` processor that records the mail it sends (a row
 * naming its service) and returns its id; each adds the welcome mail of its user 42 with its
 * own job id, `welcome-42` (jobs.md: "an id of the app's own (`jobId` when it adds the job)
 * is the job").
 *
 * Code path: lib/jobs/job-key.ts `jobTenant(job.queueName, job.prefix)` (`bullmq:emails` for
 * both: the default prefix, the same name) and `jobKeyOf` (`opts.jobId`: `welcome-42` for
 * both); lib/jobs/idempotent-jobs.service.ts `runOnce`: service B's claim finds A's record
 * done (the fingerprint is the queue name and the job's name, its data not compared) and
 * replays A's result.
 *
 * Docs quote (docs/guides/jobs.md, "Its key"): "Keys are kept per queue (`bullmq:<queue>` is
 * their tenant; under a BullMQ `prefix` of the queue's own, `bullmq:<prefix>:<queue>`: one
 * queue name under two prefixes is two queues, as BullMQ has them)": BullMQ has the queues of
 * two Redis databases as two queues too (their jobs, ids and counters apart), and nothing says
 * that they share keys.
 *
 * Severity: medium (a job never run and told done with another service's result, silently, as
 * adversary 67's; needs one queue name and one job id on two Redis databases and one
 * PostgreSQL database).
 *
 * Fails now (the skipped case unskipped): B's job completed with { service: 'a', … } (A's
 * result), and B sent no mail: mails ['a'].
 *
 * Controls: the same two services without the library (both mails sent); with it, the two
 * services told apart by prefix on one Redis database (adversary 67's fix: both sent).
 *
 * Suggested fix: tell a queue by what BullMQ tells it by: where the job's connection names a
 * Redis database other than 0, carry it in the tenant (`bullmq:<prefix>:<queue>@db<n>`, or a
 * `queueScope` option of the module for servers told apart by host), or, at least, say in
 * jobs.md that queues are told apart by name and prefix only: two services on one PostgreSQL
 * database need prefixes (or queue names) of their own, whatever Redis they use.
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

/** Where a service keeps its queues: a Redis database, a prefix (BullMQ's default if none). */
interface Place {
  db: number;
  prefix?: string;
}

/** A worker service: its own place, a queue `queue`, its processor decorated or not. */
async function startService(
  service: string,
  place: Place,
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
      BullModule.forRoot({
        connection: { host: '127.0.0.1', port: redis.port, db: place.db },
        ...(place.prefix ? { prefix: place.prefix } : {}),
      }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [idempotent ? Decorated : Plain],
  })
  class ServiceModule {}
  return NestFactory.createApplicationContext(ServiceModule, { logger: [] });
}

/** A service adds its welcome mail `welcome-42` and waits for it. */
async function welcome(place: Place, queueName: string) {
  const connection = { host: '127.0.0.1', port: redis.port, db: place.db };
  const prefix = place.prefix ? { prefix: place.prefix } : {};
  const queue = new Queue<Welcome>(queueName, { connection, ...prefix });
  const events = new QueueEvents(queueName, { connection, ...prefix });
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
async function bothServices(run: string, idempotent: boolean, a: Place, b: Place) {
  const queue = `emails-${run}`;
  const serviceA = await startService('a', a, queue, idempotent);
  const serviceB = await startService('b', b, queue, idempotent);
  try {
    const first = await welcome(a, queue);
    const second = await welcome(b, queue);
    const { rows } = await pool.query<{ service: string }>(
      'SELECT service FROM mails WHERE run = $1 ORDER BY id',
      [run],
    );
    return { a: first.service, b: second.service, mails: rows.map((row) => row.service) };
  } finally {
    await serviceA.close();
    await serviceB.close();
  }
}

const bothSent = { a: 'a', b: 'b', mails: ['a', 'b'] };

onRedis('adversary 90: one queue name on two Redis databases', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv90_redis_db');
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
    expect(await bothServices(await named('plain'), false, { db: 1 }, { db: 2 })).toEqual(bothSent);
  }, 60_000);

  it('control: with it, the services told apart by prefix on one Redis database, each sends its mail', async () => {
    expect(
      await bothServices(
        await named('prefixes'),
        true,
        { db: 3, prefix: 'svc-a' },
        { db: 3, prefix: 'svc-b' },
      ),
    ).toEqual(bothSent);
  }, 60_000);

  it("with it, one queue name on two Redis databases: B's job runs, not A's result", async () => {
    expect(await bothServices(await named('dbs'), true, { db: 4 }, { db: 5 })).toEqual(bothSent);
  }, 60_000);
});
