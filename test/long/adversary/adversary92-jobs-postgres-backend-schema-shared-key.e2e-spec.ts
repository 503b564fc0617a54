/**
 * Fixed (session of 2026-12-06 fifth): the job key's tenant is now a decision over the worker's
 * backend (lib/jobs/job-store.ts `jobStoreOf`, table-driven in job-store.spec.ts): BullMQ's
 * PostgreSQL backend (a backend with a `schema`) keeps its jobs' keys under
 * `bullmq:<schema>:<queue>:pg:` (lib/jobs/job-key.ts `jobTenant`), so schemas svc_a and svc_b
 * are two tenants; a backend that is neither Redis' nor this one fails the job
 * (`JobQueueStoreUnreadableError`), saying to give `@IdempotentJob({ namespace })`.
 *
 * Adversary 92: BullMQ 6's PostgreSQL backend (`createPostgresBackend`, its queues kept in a
 * schema of the app's choosing, `connection: { connectionString, schema }`) namespaces a queue
 * by that schema, not by a Redis prefix or database: two services whose BullMQ live in the
 * schemas `svc_a` and `svc_b` of one database (the backend's own way to keep them apart) have
 * two queues `emails`, two jobs `welcome-42`. The library keys both under `bullmq:<queue>`
 * (its tenant reads a Redis prefix and a Redis database only), so service B's job is
 * "completed" with A's result and never runs (adversary 90/91's break, on the other backend).
 *
 * User code: two worker services, one PostgreSQL database (their own tables, the library's,
 * and BullMQ's queues in a schema each):
 *   setDefaultBackendFactory(createPostgresBackend); // BullMQ 6: its queues in PostgreSQL
 *   BullModule.forRoot({ connection: { connectionString: DATABASE_URL, schema: 'svc_a', migrate: true } })
 * a queue `emails`, an `@IdempotentJob()` processor recording the mail it sends; each adds
 * `welcome-42` with its own job id.
 *
 * Code path: lib/jobs/idempotent-jobs.service.ts `runOnce` → lib/jobs/job-key.ts
 * `jobTenant(job.queueName, job.prefix, await jobRedisDb(job))`: lib/jobs/redis-db.ts
 * `jobRedisDb` finds no Redis client (the backend is PostgreSQL's) and reads the connection
 * options `{ connectionString, schema }` as Redis ones: 0. The schema is never read: one
 * tenant for both services; B's claim replays A's record.
 *
 * Docs quote (docs/guides/jobs.md, "Its key"): "Keys are kept per queue ... one queue name
 * under two prefixes, or on two databases, is two queues, as BullMQ has them". BullMQ's
 * PostgreSQL backend has them as two queues by their schema (its QueueBaseOptions: "`prefix`
 * ... Redis backend only ... the PostgreSQL backend uses a schema").
 *
 * Severity: high (a job never run and told done with another service's result, silently).
 * The docs' way out for what the library cannot tell apart ("need prefixes (or queue names)
 * of their own") does not work here either: on this backend BullMQ ignores `prefix`, and a
 * job's `prefix` is '' whatever the option (seen: `job.prefix === ''` with `prefix: 'svc'`),
 * so only distinct queue names keep the two apart.
 *
 * Fails now (un-skipped): { a: 'a', b: 'a', mails: ['a'] }, expected both sent. Seen twice.
 *
 * Controls: without the library on the same two schemas (both sent); with the library on the
 * Redis backend, two databases given as `db` (both sent).
 *
 * Suggested fix: read the backend a job's worker runs on (`worker.getBackend()`): for
 * PostgreSQL's (`PostgresQueueBackend`, its `schema`, and its database: the connection's
 * `database`, or its URL's path), name them in the tenant as the Redis database is
 * (`bullmq:<queue>:pg:<schema>:` …); or refuse a backend the library cannot tell apart, at the
 * job's first run (`UnrecoverableError`, saying so), and say in jobs.md which backends are read.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import * as bullmq from 'bullmq';
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

/** BullMQ 6's backend choice (process-wide), not in every BullMQ's typings: read as such. */
const backends = bullmq as unknown as {
  setDefaultBackendFactory(factory: unknown): void;
  getDefaultBackendFactory(): unknown;
  createPostgresBackend: unknown;
};

async function send(service: string, job: Job<Welcome>) {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO mails (service, user_id) VALUES ($1, $2) RETURNING id',
    [service, job.data.userId],
  );
  return { service, mail: rows[0].id };
}

/** Where a service keeps its queues: a PostgreSQL schema, or a Redis database. */
type Place = { schema: string } | { db: number };

function connectionOf(place: Place): never {
  return (
    'schema' in place
      ? { connectionString: database.url, schema: place.schema, migrate: true }
      : { host: '127.0.0.1', port: redis.port, db: place.db }
  ) as never;
}

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
      BullModule.forRoot({ connection: connectionOf(place) }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [idempotent ? Decorated : Plain],
  })
  class ServiceModule {}
  const app = await NestFactory.createApplicationContext(ServiceModule, { logger: [] });
  return app;
}

async function welcome(place: Place, queueName: string) {
  const connection = connectionOf(place);
  const queue = new Queue<Welcome>(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    await queue.waitUntilReady();
    const job = await queue.add('welcome', { userId: 42 }, { jobId: 'welcome-42' });
    return (await job.waitUntilFinished(events, 20_000)) as { service: string };
  } finally {
    await events.close();
    await queue.close();
  }
}

async function bothServices(run: string, idempotent: boolean, a: Place, b: Place) {
  const before = backends.getDefaultBackendFactory();
  if ('schema' in a) backends.setDefaultBackendFactory(backends.createPostgresBackend);
  await pool.query(`ALTER TABLE mails ALTER COLUMN run SET DEFAULT '${run}'`);
  const queue = `emails-${run}`;
  try {
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
  } finally {
    backends.setDefaultBackendFactory(before);
  }
}

const bothSent = { a: 'a', b: 'b', mails: ['a', 'b'] };

onRedis("adversary 92: one queue name in two schemas of BullMQ's PostgreSQL backend", () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv92_pg_backend_schema');
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

  it('control: without the library, each service sends its mail', async () => {
    expect(
      await bothServices('plain', false, { schema: 'plain_a' }, { schema: 'plain_b' }),
    ).toEqual(bothSent);
  }, 90_000);

  it('control: with the library on Redis, two databases given as db, each sends its mail', async () => {
    expect(await bothServices('redis', true, { db: 4 }, { db: 5 })).toEqual(bothSent);
  }, 60_000);

  it("with it, BullMQ in schemas svc_a and svc_b: B's job runs, not A's result", async () => {
    expect(await bothServices('pg', true, { schema: 'svc_a' }, { schema: 'svc_b' })).toEqual(
      bothSent,
    );
  }, 90_000);
});
