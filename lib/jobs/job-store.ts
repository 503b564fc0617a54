import { dbIndex, redisDbOf } from './redis-db.js';
import { withLibraryTypes } from '../connection/library-types.js';

/**
 * Where a job's queue keeps its jobs, as part of their key's tenant (lib/jobs/job-key.ts
 * `jobTenant`): BullMQ keeps one queue name in two places (two Redis databases, two schemas of
 * its PostgreSQL backend) as two queues, their job ids apart. A place the library cannot read
 * is said so (`unreadable`, with what it is), never taken for Redis' database 0: two services
 * on it would share their jobs' keys (adversary 92).
 */
export type JobStore =
  | { kind: 'redis'; db: number }
  | { kind: 'postgres'; schema: string }
  | { kind: 'unreadable'; what: string };

/** What the library saw of a job's worker (see `jobStore`). */
export interface SeenWorker {
  /** BullMQ 6: its backend (`worker.getBackend()`); `undefined` on BullMQ 5. */
  backend?: unknown;
  /** The backend's (BullMQ 5: the worker's) live Redis client, resolved; `undefined` if none. */
  client?: unknown;
  /** The worker's `connection` option, as the app gave it. */
  connection?: unknown;
  /**
   * BullMQ 6's PostgreSQL backend on a `pg.Pool` of the app's (`appPoolOf`): the schema that
   * pool's `search_path` finds BullMQ's tables in, as the library asked it (`searchPathSchema`);
   * `null` where it finds none; `undefined` where it was not asked.
   */
  poolSchema?: string | null;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

function nameOf(value: object): string {
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== '' && name !== 'Object' ? name : 'an object';
}

/** Redis clients the library knows by name but cannot read the database of. */
const UNREADABLE_CLIENTS: Readonly<Record<string, string>> = {
  BunRedisAdapter: 'Bun’s RedisClient (BullMQ’s BunRedisAdapter, whose options are empty)',
};

/**
 * The Redis database of a live Redis client (a pure decision), by the client's shape:
 *  - ioredis (BullMQ 6 wraps it, `__bullmq_iredis`; BullMQ 5 holds it as it is: its
 *    `connector`, or a cluster's `redisOptions`): its options as it parsed them (`redisDbOf`);
 *  - Valkey GLIDE through BullMQ's adapter (`createValkeyGlideClient`): its configuration's
 *    `addresses`, and `databaseId` (0 where it names none, as GLIDE takes it);
 *  - node-redis through BullMQ's adapter: its `raw` client (`sendCommand`, `isOpen`), whose
 *    options name a `url` or a `database`;
 *  - any other (Bun's, a custom adapter): unreadable, named.
 */
export function redisClientStoreOf(client: unknown): JobStore {
  if (!isObject(client))
    return { kind: 'unreadable', what: `a Redis client that is ${typeof client}` };
  const options = isObject(client.options) ? client.options : {};
  const ioredis =
    client.__bullmq_iredis === true ||
    'connector' in client ||
    (client.isCluster === true && isObject(options.redisOptions));
  if (ioredis) return { kind: 'redis', db: redisDbOf(client) };
  if (Array.isArray(options.addresses)) {
    return { kind: 'redis', db: dbIndex(options.databaseId) ?? 0 };
  }
  const raw = client.raw;
  if (isObject(raw) && typeof raw.sendCommand === 'function' && 'isOpen' in raw) {
    return { kind: 'redis', db: redisDbOf(client) };
  }
  const name = nameOf(client);
  return { kind: 'unreadable', what: UNREADABLE_CLIENTS[name] ?? `a Redis client (${name})` };
}

/** What the library asks of a pool of the app's (pg's `Pool.query`). */
export interface QueryablePool {
  query(config: { text: string; types?: object }): Promise<{ rows: unknown[] }>;
}

/**
 * The app's own `pg.Pool` a BullMQ PostgreSQL backend runs on (a pure decision), or
 * `undefined` where the backend made its pool (or is another). BullMQ takes the `schema` of
 * its options only where it makes the pool: it pins that pool's `search_path` to it, its
 * statements unqualified. A pool of the app's (`connection.ownsPool === false`) is taken as it
 * is, its `search_path` the app's, while the backend's `schema` stays BullMQ's default,
 * `bullmq` (postgres-connection.js): its queues are where that path finds BullMQ's tables
 * (adversary 94).
 */
export function appPoolOf(backend: unknown): QueryablePool | undefined {
  if (!isObject(backend) || !isObject(backend.connection)) return undefined;
  const { ownsPool, pool } = backend.connection;
  if (ownsPool !== false || !isObject(pool) || typeof pool.query !== 'function') return undefined;
  return pool as unknown as QueryablePool;
}

/**
 * Where a job's worker keeps its jobs (a pure decision over what the library saw of it):
 *  - BullMQ 6's PostgreSQL backend (a backend with a `schema`): that schema, BullMQ's
 *    namespace of its queues there (its `prefix` is not used: a job's is ''); on a pool of
 *    the app's (`appPoolOf`), the schema its `search_path` finds BullMQ's tables in
 *    (`poolSchema`), unreadable where it finds none or was not asked;
 *  - another backend that is not Redis' (no `client`): unreadable, named;
 *  - Redis': its live client (`redisClientStoreOf`); where it has none (not connected yet, or
 *    failed), the worker's `connection`: options (a plain object, as ioredis reads them:
 *    `redisDbOf`), or a client of the app's (`redisClientStoreOf`); none: database 0 (BullMQ's
 *    default, `localhost:6379`).
 */
export function jobStoreOf(seen: SeenWorker): JobStore {
  const { backend, client, connection, poolSchema } = seen;
  if (isObject(backend)) {
    const schema =
      backend.schema ?? (isObject(backend.connection) ? backend.connection.schema : undefined);
    if (
      schema !== undefined &&
      isObject(backend.connection) &&
      backend.connection.ownsPool === false
    ) {
      return typeof poolSchema === 'string' && poolSchema !== ''
        ? { kind: 'postgres', schema: poolSchema }
        : {
            kind: 'unreadable',
            what:
              `a pg.Pool of the app’s given to a BullMQ backend (${nameOf(backend)}), whose ` +
              (poolSchema === null ? 'search_path finds no BullMQ table' : 'schema was not read'),
          };
    }
    if (schema !== undefined) {
      return typeof schema === 'string' && schema !== ''
        ? { kind: 'postgres', schema }
        : { kind: 'unreadable', what: `a BullMQ backend (${nameOf(backend)}) with no schema` };
    }
    if (!('client' in backend)) {
      return { kind: 'unreadable', what: `a BullMQ backend (${nameOf(backend)})` };
    }
  }
  if (client !== undefined) return redisClientStoreOf(client);
  if (!isObject(connection)) return { kind: 'redis', db: 0 };
  const proto = Object.getPrototypeOf(connection) as unknown;
  const plain = proto === Object.prototype || proto === null;
  return plain ? { kind: 'redis', db: redisDbOf(connection) } : redisClientStoreOf(connection);
}

/** What the library reads of a job's worker (BullMQ's `Job` keeps it as `queue`). */
interface WorkerLike {
  opts?: { connection?: unknown };
  /** BullMQ 6: its backend: Redis' (`client`, the live Redis client), or PostgreSQL's. */
  getBackend?: () => unknown;
  /** BullMQ 5: the live Redis client. */
  client?: unknown;
}

/** A promise's value, or `undefined` where `value` is none or it fails. */
async function settled(value: unknown): Promise<unknown> {
  if (typeof (value as { then?: unknown } | undefined)?.then !== 'function') return undefined;
  try {
    return await (value as Promise<unknown>);
  } catch {
    return undefined;
  }
}

/**
 * Where an app's pool finds BullMQ's tables: the schema of the table `job` as its session's
 * `search_path` resolves the name, as BullMQ's unqualified statements do (`current_schema()`
 * would name the path's first schema, which need not hold them). Built-ins qualified.
 */
const SEARCH_PATH_SCHEMA_SQL =
  'SELECT n.nspname::text AS schema FROM pg_catalog.pg_class c ' +
  'JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace ' +
  "WHERE c.oid = pg_catalog.to_regclass('job')";

/** Each app pool's answer, asked once (a failed question is asked again by the next job). */
const poolSchemas = new WeakMap<object, Promise<string | null>>();

/**
 * The schema `pool`'s `search_path` finds BullMQ's tables in (`null`: none), asked once per
 * pool. A failure (the database unreachable) rejects, a passing failure of the job.
 */
export function searchPathSchema(pool: QueryablePool): Promise<string | null> {
  let asked = poolSchemas.get(pool);
  if (!asked) {
    asked = pool.query(withLibraryTypes({ text: SEARCH_PATH_SCHEMA_SQL })).then(({ rows }) => {
      const schema = (rows[0] as { schema?: unknown } | undefined)?.schema;
      return typeof schema === 'string' && schema !== '' ? schema : null;
    });
    poolSchemas.set(pool, asked);
    asked.catch(() => {
      if (poolSchemas.get(pool) === asked) poolSchemas.delete(pool);
    });
  }
  return asked;
}

/**
 * Where a job's worker keeps its jobs (`jobStoreOf` over what BullMQ exposes of it, the app's
 * pool asked where BullMQ's PostgreSQL backend runs on one). Redis' database 0 where the job
 * does not carry its worker (a sandboxed processor's job, a job-like object of the app's), as
 * before the library read it.
 */
export async function jobStore(job: object): Promise<JobStore> {
  const worker = (job as { queue?: WorkerLike }).queue;
  if (typeof worker !== 'object' || worker === null) return { kind: 'redis', db: 0 };
  let backend: unknown;
  try {
    backend = typeof worker.getBackend === 'function' ? worker.getBackend() : undefined;
  } catch {
    backend = undefined;
  }
  let client: unknown;
  try {
    const live = isObject(backend)
      ? 'client' in backend
        ? backend.client
        : undefined
      : worker.client;
    client = await settled(live);
  } catch {
    client = undefined;
  }
  const appPool = appPoolOf(backend);
  const poolSchema = appPool ? await searchPathSchema(appPool) : undefined;
  return jobStoreOf({ backend, client, connection: worker.opts?.connection, poolSchema });
}
