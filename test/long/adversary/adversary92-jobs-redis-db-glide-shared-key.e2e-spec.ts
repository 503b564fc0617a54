/**
 * Fixed (session of 2026-12-06 fifth): the job key's tenant is now a decision over the worker's
 * backend (lib/jobs/job-store.ts `jobStoreOf` / `redisClientStoreOf`, table-driven in
 * job-store.spec.ts): a live Redis client is read by its shape: ioredis (`db`/`url`),
 * node-redis through BullMQ's adapter (`database`/`url`), Valkey GLIDE through
 * `createValkeyGlideClient` (its configuration's `addresses`, and `databaseId`: this test's
 * case, tenant `bullmq:<queue>:db<n>:` as on ioredis); a client the library cannot read (Bun's,
 * a custom adapter) fails the job (`JobQueueStoreUnreadableError`), saying to give
 * `@IdempotentJob({ namespace })` (new option, lib/jobs/idempotent-job.options.ts). GLIDE is a
 * dev dependency (`@valkey/valkey-glide`, its prebuilt binary, no install script), so the GLIDE
 * cases run everywhere the suite does; the adapter's shape is also checked in job-store.spec.ts.
 *
 * Adversary 92: a BullMQ worker connected through BullMQ's own Valkey GLIDE adapter
 * (`createValkeyGlideClient`, BullMQ 6) on a Redis database other than 0 keeps its jobs' keys
 * under the tenant of database 0: the adapter's `.options` is GLIDE's configuration, which
 * names its database `databaseId`, and `redisDbOf` reads only `url`, `db` and `database`. Two
 * services on databases 2 and 3 of one server, one queue name, share their jobs' keys again
 * (adversary 90/91's break): service B's job is "completed" with A's result and never runs.
 *
 * User code: two worker services on one Valkey/Redis server and one PostgreSQL database:
 *   const raw = await GlideClient.createClient({ addresses: [{ host, port }], databaseId: 2 });
 *   BullModule.forRoot({ connection: createValkeyGlideClient(raw) })
 * a queue `emails`, an `@IdempotentJob()` processor recording the mail it sends; each adds
 * `welcome-42` with its own job id.
 *
 * Code path: lib/jobs/redis-db.ts `jobRedisDb(job)` → `liveClientOf(worker)` (BullMQ 6's
 * `getBackend().client`, the `ValkeyGlideAdapter`) → `redisDbOf(adapter)`: `adapter.options` is
 * `{ addresses: [...], databaseId: 2 }` (its `raw.config`), no `url`, `db` or `database` → 0 →
 * lib/jobs/job-key.ts `jobTenant(queue, prefix, 0)` = `bullmq:<queue>` for both services;
 * lib/jobs/idempotent-jobs.service.ts `runOnce` replays A's record for B's job.
 *
 * Docs quote (docs/guides/jobs.md, "Its key"): "on a Redis database other than 0,
 * `bullmq:<queue>:db<n>:` ...: one queue name under two prefixes, or on two databases, is two
 * queues, as BullMQ has them). The database is the one the worker's Redis client reads,
 * however the connection names it". BullMQ's README documents the GLIDE adapter as a
 * connection ("If you use the Valkey Glide adapter (`createValkeyGlideClient`), install
 * `@valkey/valkey-glide`").
 *
 * Severity: high (a job never run and told done with another service's result, silently).
 *
 * Fails now (un-skipped, with `@valkey/valkey-glide` installed and reachable: GLIDE_MODULE=
 * /path/to/node_modules/@valkey/valkey-glide/build-ts/index.js, NODE_PATH holding it for
 * BullMQ's own require): { a: 'a', b: 'a', mails: ['a'] }, expected both sent. Seen twice.
 *
 * Controls: with the library and the databases given as ioredis' `db` (both sent); without the
 * library on GLIDE (both sent; run where GLIDE is installed).
 *
 * Suggested fix: in `redisDbOf`, read GLIDE's `databaseId` too (a number), and better, for a
 * live client that is not ioredis, ask it (`CLIENT INFO` gives `db=<n>` on Redis 6.2+ and
 * Valkey) once per client; say in jobs.md which clients are read, and that another client
 * (Bun's `RedisClient`, a custom adapter) keeps its keys as database 0's.
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

/** A GLIDE client, as the app makes it (a dev dependency of this project). */
interface GlideModule {
  GlideClient: {
    createClient(config: {
      addresses: { host: string; port: number }[];
      databaseId: number;
    }): Promise<{ close(): void }>;
  };
}

/** GLIDE is a dev dependency; GLIDE_MODULE names another build of it. */
const glideModule = process.env.GLIDE_MODULE ?? '@valkey/valkey-glide';

async function send(service: string, job: Job<Welcome>) {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO mails (service, user_id) VALUES ($1, $2) RETURNING id',
    [service, job.data.userId],
  );
  return { service, mail: rows[0].id };
}

/** A service's Redis connection: GLIDE through BullMQ's adapter, or ioredis' options. */
interface Place {
  db: number;
  glide?: boolean;
}

const closers: (() => void)[] = [];

async function connectionOf(place: Place): Promise<unknown> {
  if (!place.glide) return { host: '127.0.0.1', port: redis.port, db: place.db };
  const { GlideClient } = (await import(glideModule)) as GlideModule;
  const raw = await GlideClient.createClient({
    addresses: [{ host: '127.0.0.1', port: redis.port }],
    databaseId: place.db,
  });
  closers.push(() => raw.close());
  const adapt = (bullmq as unknown as { createValkeyGlideClient: (raw: unknown) => unknown })
    .createValkeyGlideClient;
  return adapt(raw);
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
      BullModule.forRoot({ connection: (await connectionOf(place)) as never }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [idempotent ? Decorated : Plain],
  })
  class ServiceModule {}
  return NestFactory.createApplicationContext(ServiceModule, { logger: [] });
}

async function welcome(place: Place, queueName: string) {
  const connection = (await connectionOf(place)) as never;
  const queue = new Queue<Welcome>(queueName, { connection });
  const events = new QueueEvents(queueName, {
    connection: { host: '127.0.0.1', port: redis.port, db: place.db },
  });
  try {
    await events.waitUntilReady();
    const job = await queue.add('welcome', { userId: 42 }, { jobId: 'welcome-42' });
    return (await job.waitUntilFinished(events, 15_000)) as { service: string };
  } finally {
    await events.close();
    await queue.close();
  }
}

async function bothServices(run: string, idempotent: boolean, a: Place, b: Place) {
  await pool.query(`ALTER TABLE mails ALTER COLUMN run SET DEFAULT '${run}'`);
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
    for (const close of closers.splice(0)) close();
  }
}

const bothSent = { a: 'a', b: 'b', mails: ['a', 'b'] };

onRedis('adversary 92: one queue name on two Redis databases through the GLIDE adapter', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv92_redis_db_glide');
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

  it('control: with the library, the databases given as ioredis db, each sends its mail', async () => {
    expect(await bothServices('ioredis', true, { db: 4 }, { db: 5 })).toEqual(bothSent);
  }, 60_000);

  it('control: without the library, on GLIDE, each sends its mail', async () => {
    expect(
      await bothServices('glide-plain', false, { db: 2, glide: true }, { db: 3, glide: true }),
    ).toEqual(bothSent);
  }, 60_000);

  it("with it, on GLIDE databases 6 and 7: B's job runs, not A's result", async () => {
    expect(
      await bothServices('glide', true, { db: 6, glide: true }, { db: 7, glide: true }),
    ).toEqual(bothSent);
  }, 60_000);
});
