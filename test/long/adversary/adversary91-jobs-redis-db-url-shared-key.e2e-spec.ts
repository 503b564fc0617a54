/**
 * Fixed (session of 2026-12-06 fourth): a job's tenant carries the Redis database its worker's
 * live client reads (lib/jobs/redis-db.ts `jobRedisDb`: BullMQ 6's `getBackend().client`, BullMQ
 * 5's `client`, whose ioredis options hold the database parsed from a `url` or a string `db`);
 * where no live client is at hand, `redisDbOf` reads the connection as ioredis does (a `url`'s
 * path, else its `?db=`, before `db`, a string `db` parsed, node-redis' `database`).
 *
 * Adversary 91: adversary 90's fix (a job's tenant carries its worker's Redis database,
 * lib/jobs/job-key.ts `redisDbOf`) reads only a `db` option (or an ioredis client's
 * `.options.db`). A connection given as BullMQ's `url` option (`connection: { url:
 * 'redis://host:6379/4' }`, BullMQ's RedisOptions `url`, which its RedisConnection passes to
 * `new IORedis(url, rest)`) names its database in the URL's path: `redisDbOf` reads 0, so two
 * services on databases 4 and 5 of one server share the tenant `bullmq:<queue>` again, and
 * adversary 90's break comes back: service B's job is "completed" with A's result and never
 * runs, silently.
 *
 * User code: two worker services on one Redis server and one PostgreSQL database, each with
 *   BullModule.forRoot({ connection: { url: `redis://127.0.0.1:${port}/${8 | 9}` } })
 * (the twelve-factor `REDIS_URL` way), a queue `emails`, an `@IdempotentJob()` processor
 * recording the mail it sends; each adds `welcome-42` with its own job id.
 *
 * Code path: lib/jobs/job-key.ts `jobRedisDb(job)` → `redisDbOf(worker.opts.connection)`:
 * `{ url }` has no `db` and no `options` → 0 → `jobTenant(queue, prefix, 0)` =
 * `bullmq:emails-dbs` for both; lib/jobs/idempotent-jobs.service.ts `runOnce` replays A's
 * record for B's job.
 *
 * Docs quote (docs/guides/jobs.md): "on a Redis database other than 0, the connection's `db`,
 * `bullmq:<queue>:db<n>:` ...: one queue name under two prefixes, or on two databases, is two
 * queues, as BullMQ has them". Nothing says the database must be given as `db`, not in a URL.
 *
 * Severity: high (a job never run and told done with another service's result, silently;
 * the documented fix does not hold for a connection given by URL).
 *
 * Fails now (un-skipped): { a: 'a', b: 'a', mails: ['a'] }, expected both sent. The same for
 * a `db` given as a string, as a configuration reads it (`db: config.get('REDIS_DB')`, which
 * ioredis parses, Redis.js `parseInt(options.db, 10)`): `redisDbOf` reads a string as 0.
 *
 * Controls: without the library (both sent); with it and the database given as `db`
 * (adversary 90's fix: both sent).
 *
 * Suggested fix: in `redisDbOf`, read a string `db` as ioredis does (`parseInt`), read a `url` option's path (`new URL(url).pathname.slice(1)`,
 * as ioredis parses it), or better, read the database from the worker's live client
 * (`await worker.client` → `.options.db`, ioredis having parsed the URL), and say in jobs.md
 * which connection forms are read.
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
  /** The database named in a `url` (`redis://host:port/<db>`), not as `db`. */
  url?: boolean;
  /** The database as a string (`db: config.get('REDIS_DB')`), which ioredis parses. */
  text?: boolean;
}

/** The place's connection, as its service gives BullMQ. */
function connectionOf(place: Place) {
  return place.url
    ? { url: `redis://127.0.0.1:${redis.port}/${place.db}` }
    : {
        host: '127.0.0.1',
        port: redis.port,
        db: place.text ? (String(place.db) as never) : place.db,
      };
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
        connection: connectionOf(place),
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
  const connection = connectionOf(place);
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

onRedis('adversary 91: one queue name on two Redis databases named by URL', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv91_redis_db_url');
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
    expect(
      await bothServices(await named('plain'), false, { db: 4, url: true }, { db: 5, url: true }),
    ).toEqual(bothSent);
  }, 60_000);

  it('control: without the library, the databases given as strings, each sends its mail', async () => {
    expect(
      await bothServices(
        await named('plain-text'),
        false,
        { db: 12, text: true },
        { db: 13, text: true },
      ),
    ).toEqual(bothSent);
  }, 60_000);

  it('control: with it, the databases given as db, each sends its mail', async () => {
    expect(await bothServices(await named('db'), true, { db: 6 }, { db: 7 })).toEqual(bothSent);
  }, 60_000);

  it("with it, the databases given in a url: B's job runs, not A's result", async () => {
    expect(
      await bothServices(await named('url'), true, { db: 8, url: true }, { db: 9, url: true }),
    ).toEqual(bothSent);
  }, 60_000);

  it("with it, the databases given as strings (an env variable): B's job runs, not A's result", async () => {
    expect(
      await bothServices(await named('text'), true, { db: 10, text: true }, { db: 11, text: true }),
    ).toEqual(bothSent);
  }, 60_000);
});
