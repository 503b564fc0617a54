/**
 * Fixed (session of 2026-12-06 fifth): where the backend did not make its pool
 * (`connection.ownsPool === false`: lib/jobs/job-store.ts `appPoolOf`), the library asks that
 * pool, once (`searchPathSchema`, cached per pool), which schema its search_path finds
 * BullMQ's `job` table in (`to_regclass('job')`, as BullMQ's unqualified statements resolve
 * it), and `jobStoreOf` takes that schema, not the backend's `bullmq`; where the path finds no
 * BullMQ table the place is unreadable (`JobQueueStoreUnreadableError` without a namespace).
 * Table-driven spec: lib/jobs/job-store.spec.ts. docs/guides/jobs.md says so.
 *
 * Adversary 94: BullMQ 6's PostgreSQL backend given an existing `pg.Pool` (its documented third
 * form: "a connection string, pool config (optionally carrying a `schema`), or an existing
 * `pg.Pool`") keeps its queues in the schema the pool's `search_path` names (its SQL is
 * unqualified), while its connection's `schema` stays `bullmq` (postgres-connection.js: a
 * user's pool → `this.schema = DEFAULT_SCHEMA`). The library reads that `schema` as where the
 * queue is (lib/jobs/job-store.ts `jobStoreOf`: `backend.connection.schema`), so a service
 * whose pool is pinned to its own schema gets the tenant of the service on the default schema:
 * `bullmq:bullmq:<queue>:pg:` for both. Adversary 92's break comes back through the pool form:
 * service B's job `welcome-42` is "completed" with service A's result, and B's mail is never
 * sent.
 *
 * User code: one PostgreSQL database, two worker services, a queue `emails` each:
 *   A: BullModule.forRoot({ connection: { connectionString, migrate: true } }) (schema bullmq),
 *      with setDefaultBackendFactory(createPostgresBackend);
 *   B: shares its own pool, pinned to its schema:
 *      const pool = new Pool({ connectionString, options: '-c search_path=billing' });
 *      await runMigrations(await pool.connect(), 'billing');
 *      BullModule.forRoot({ connection: pool })
 * `@IdempotentJob()` processors recording the mail each sends; each adds `welcome-42`.
 *
 * Code path: lib/jobs/job-store.ts `jobStore(job)` → `worker.getBackend()` (a
 * PostgresQueueBackend, no `schema` of its own) → `jobStoreOf`: `backend.connection.schema` =
 * 'bullmq' (BullMQ's default, not the pool's search_path) → `{ kind: 'postgres', schema:
 * 'bullmq' }` → lib/jobs/job-key.ts `jobTenant` = `bullmq:bullmq:<queue>:pg:` for A and B →
 * lib/jobs/idempotent-jobs.service.ts `runOnce` replays A's record for B's job.
 *
 * Docs quote (docs/guides/jobs.md, "Its key"): "in a schema of BullMQ's PostgreSQL backend
 * (`createPostgresBackend`), `bullmq:<schema>:<queue>:pg:`: one queue name under two prefixes,
 * on two databases or in two schemas, is two queues, as BullMQ has them" and "A queue the
 * library cannot read the place of (... a custom client or backend) is not taken for database
 * 0: its jobs fail at once (`JobQueueStoreUnreadableError`)".
 *
 * Severity: high (a job never run, told done with another service's result, silently).
 *
 * Fails now (un-skipped): { a: 'a', b: 'a', mails: ['a'] }, expected B's mail sent.
 *
 * Controls: without the library (both sent: BullMQ keeps the two schemas' queues apart); with
 * it, B's schema given as the backend's `schema` option (both sent).
 *
 * Suggested fix: where the backend does not own its pool (`connection.ownsPool === false`, or
 * `connection.pool` not the one it made), its `schema` is not where the queue is: read the
 * pool's `current_schema()` once per pool (a query on the worker's pool), or take it for
 * unreadable (`JobQueueStoreUnreadableError`, asking for a namespace); say so in jobs.md.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import * as bullmq from 'bullmq';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
const userPools: Pool[] = [];

interface Welcome {
  userId: number;
}

/** BullMQ 6's PostgreSQL backend, not in every BullMQ's typings: read as such. */
const backends = bullmq as unknown as {
  setDefaultBackendFactory(factory: unknown): void;
  getDefaultBackendFactory(): unknown;
  createPostgresBackend: unknown;
  runMigrations(client: unknown, schema: string): Promise<void>;
};

async function send(service: string, job: Job<Welcome>) {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO mails (service, user_id) VALUES ($1, $2) RETURNING id',
    [service, job.data.userId],
  );
  return { service, mail: rows[0].id };
}

/** Where a service keeps its queues: BullMQ's own pool on a schema, or a pool of the app's. */
type Place = { schema: string } | { pool: Pool };

/** The app's own pool, pinned to its schema, BullMQ's tables migrated there. */
async function userPool(schema: string): Promise<Pool> {
  const own = new Pool({
    connectionString: database.url,
    options: `-c search_path=${schema}`,
    max: 6,
  });
  userPools.push(own);
  const client = await own.connect();
  try {
    await backends.runMigrations(client, schema);
  } finally {
    client.release();
  }
  return own;
}

function connectionOf(place: Place): never {
  return (
    'pool' in place
      ? place.pool
      : { connectionString: database.url, schema: place.schema, migrate: true }
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
  return NestFactory.createApplicationContext(ServiceModule, { logger: [] });
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

/** A on BullMQ's default schema; B as `b` says (its own pool, or the `schema` option). */
async function bothServices(run: string, idempotent: boolean, b: 'user pool' | 'schema') {
  const before = backends.getDefaultBackendFactory();
  backends.setDefaultBackendFactory(backends.createPostgresBackend);
  await pool.query(`ALTER TABLE mails ALTER COLUMN run SET DEFAULT '${run}'`);
  const queue = `emails-${run}`;
  const a: Place = { schema: 'bullmq' };
  try {
    const serviceA = await startService('a', a, queue, idempotent);
    const placeB: Place =
      b === 'user pool' ? { pool: await userPool(`billing_${run}`) } : { schema: `billing_${run}` };
    const serviceB = await startService('b', placeB, queue, idempotent);
    try {
      const first = await welcome(a, queue);
      const second = await welcome(placeB, queue);
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

describe("adversary 94: BullMQ's PostgreSQL backend on a pool of the app's", () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv94_pg_backend_user_pool');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query(
      `CREATE TABLE mails (id serial PRIMARY KEY, service text NOT NULL, user_id int NOT NULL,
         run text NOT NULL DEFAULT '')`,
    );
    // BullMQ's backend on a pool of the app's asserts its default schema (`bullmq`) is migrated
    // when it starts, whichever schema its queues are in. Left to service A's `migrate: true`,
    // B could start first on a slow machine (seen in CI): its worker then retried the failed
    // start without end, logging each try, until the jest worker ran out of memory.
    const client = await pool.connect();
    try {
      await backends.runMigrations(client, 'bullmq');
    } finally {
      client.release();
    }
  }, 60_000);

  afterAll(async () => {
    for (const own of userPools.splice(0)) await own.end().catch(() => undefined);
    await pool?.end();
    await database?.drop();
  });

  it('control: without the library, B on its own pool, each service sends its mail', async () => {
    expect(await bothServices('plain', false, 'user pool')).toEqual(bothSent);
  }, 90_000);

  it("control: with it, B's schema given as the backend's schema option, each sends its mail", async () => {
    expect(await bothServices('schema', true, 'schema')).toEqual(bothSent);
  }, 90_000);

  it("with it, B on its own pool pinned to its schema: B's job runs, not A's result", async () => {
    expect(await bothServices('pool', true, 'user pool')).toEqual(bothSent);
  }, 90_000);
});
