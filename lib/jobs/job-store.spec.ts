import {
  appPoolOf,
  jobStore,
  jobStoreOf,
  redisClientStoreOf,
  searchPathSchema,
} from './job-store.js';
import { LIBRARY_TYPES } from '../connection/library-types.js';

/** Shapes of the clients and backends as BullMQ 6 (and 5) hold them. */
const ioredisProxy = (options: object) => ({ __bullmq_iredis: true, isCluster: false, options });
const ioredisRaw = (options: object) => ({ connector: {}, isCluster: false, options });
const ioredisCluster = { isCluster: true, options: { redisOptions: { password: 'p' } } };
class ValkeyGlideAdapter {
  readonly isCluster = false;
  constructor(readonly options: object) {}
}
class NodeRedisAdapter {
  readonly raw = { sendCommand: () => undefined, isOpen: true };
  readonly isCluster = false;
  constructor(readonly options: object) {}
}
class BunRedisAdapter {
  readonly raw = { send: () => undefined, connected: true };
  readonly options = {};
  readonly isCluster = false;
}
class MyRedisClient {
  readonly options = { db: 3 };
}
class PostgresQueueBackend {
  constructor(readonly schema: unknown) {}
}
class RedisQueueBackend {
  constructor(private readonly live: unknown) {}
  get client() {
    return this.live;
  }
}
class SqliteQueueBackend {}

/** A `pg.Pool` of the app's whose search_path finds BullMQ's `job` table in `schema`. */
function fakePool(schema: string | null) {
  const pool = {
    asked: 0,
    query: ({ text, types }: { text: string; types?: object }) => {
      pool.asked += 1;
      expect(text).toContain("pg_catalog.to_regclass('job')");
      // Read with the library's parsers, not the pool's (adversary 105).
      expect(types).toBe(LIBRARY_TYPES);
      return Promise.resolve({ rows: schema === null ? [] : [{ schema }] });
    },
  };
  return pool;
}
/** BullMQ 6's PostgresQueueBackend on a pool of the app's: its schema stays `bullmq`. */
function appPoolBackend(pool: object) {
  return Object.assign(new PostgresQueueBackend('bullmq'), {
    connection: { schema: 'bullmq', ownsPool: false, pool },
  });
}
/** ... and on the pool it made, its search_path pinned to its schema. */
function ownPoolBackend(schema: string) {
  return Object.assign(new PostgresQueueBackend(schema), {
    connection: { schema, ownsPool: true, pool: fakePool('elsewhere') },
  });
}

describe('appPoolOf', () => {
  const pool = fakePool('billing');
  it.each([
    ['a backend on the app’s pool: that pool', appPoolBackend(pool), pool],
    ['a backend on a pool it made: none to ask', ownPoolBackend('svc_a'), undefined],
    ['a backend with no connection', new PostgresQueueBackend('svc_a'), undefined],
    [
      'a pool of the app’s that cannot be asked',
      { connection: { ownsPool: false, pool: {} } },
      undefined,
    ],
    ['Redis’ backend', new RedisQueueBackend(ioredisProxy({})), undefined],
    ['no backend (BullMQ 5)', undefined, undefined],
  ])('%s', (_name, backend, asked) => {
    expect(appPoolOf(backend)).toBe(asked);
  });
});

describe('redisClientStoreOf', () => {
  it.each([
    ['ioredis (BullMQ 6 wraps it)', ioredisProxy({ db: 4 }), { kind: 'redis', db: 4 }],
    ['ioredis on database 0', ioredisProxy({ db: 0 }), { kind: 'redis', db: 0 }],
    ['ioredis as it is (BullMQ 5)', ioredisRaw({ db: '11' }), { kind: 'redis', db: 11 }],
    ['ioredis from a url', ioredisProxy({ url: 'redis://r/9' }), { kind: 'redis', db: 9 }],
    ['an ioredis cluster (database 0 only)', ioredisCluster, { kind: 'redis', db: 0 }],
    [
      'GLIDE through BullMQ’s adapter: databaseId',
      new ValkeyGlideAdapter({ addresses: [{ host: 'r', port: 6379 }], databaseId: 2 }),
      { kind: 'redis', db: 2 },
    ],
    [
      'GLIDE naming no database: 0, as GLIDE takes it',
      new ValkeyGlideAdapter({ addresses: [{ host: 'r' }] }),
      { kind: 'redis', db: 0 },
    ],
    [
      'GLIDE’s cluster configuration with a databaseId',
      { isCluster: true, options: { addresses: [{ host: 'r' }], databaseId: 3 } },
      { kind: 'redis', db: 3 },
    ],
    [
      'node-redis through BullMQ’s adapter: database',
      new NodeRedisAdapter({ database: 6 }),
      { kind: 'redis', db: 6 },
    ],
    [
      'node-redis through BullMQ’s adapter: url',
      new NodeRedisAdapter({ url: 'redis://r:6379/7' }),
      { kind: 'redis', db: 7 },
    ],
    [
      'Bun’s client (its options are empty): unreadable',
      new BunRedisAdapter(),
      {
        kind: 'unreadable',
        what: 'Bun’s RedisClient (BullMQ’s BunRedisAdapter, whose options are empty)',
      },
    ],
    [
      'a custom client, even naming a db: unreadable (not known to read it so)',
      new MyRedisClient(),
      { kind: 'unreadable', what: 'a Redis client (MyRedisClient)' },
    ],
    [
      'a plain object of no known client',
      { options: { db: 5 }, status: 'ready' },
      { kind: 'unreadable', what: 'a Redis client (an object)' },
    ],
    ['no object', 'redis://r/1', { kind: 'unreadable', what: 'a Redis client that is string' }],
  ])('%s', (_name, client, store) => {
    expect(redisClientStoreOf(client)).toEqual(store);
  });
});

describe('jobStoreOf', () => {
  it.each([
    [
      'BullMQ 6 on Redis: its live client',
      { backend: new RedisQueueBackend(null), client: ioredisProxy({ db: 9 }) },
      { kind: 'redis', db: 9 },
    ],
    [
      'BullMQ 6 on GLIDE: its live client',
      {
        backend: new RedisQueueBackend(null),
        client: new ValkeyGlideAdapter({ addresses: [], databaseId: 7 }),
      },
      { kind: 'redis', db: 7 },
    ],
    [
      'BullMQ 6 on Redis, no live client: its connection options (ioredis reads them)',
      { backend: new RedisQueueBackend(null), connection: { host: 'r', db: 2 } },
      { kind: 'redis', db: 2 },
    ],
    [
      'no live client, a client of the app’s as its connection',
      { backend: new RedisQueueBackend(null), connection: new BunRedisAdapter() },
      {
        kind: 'unreadable',
        what: 'Bun’s RedisClient (BullMQ’s BunRedisAdapter, whose options are empty)',
      },
    ],
    ['no live client, no connection: BullMQ’s default, database 0', {}, { kind: 'redis', db: 0 }],
    ['BullMQ 5: its live client', { client: ioredisRaw({ db: 3 }) }, { kind: 'redis', db: 3 }],
    [
      'BullMQ’s PostgreSQL backend: its schema (not its connection, not a Redis db)',
      { backend: new PostgresQueueBackend('svc_a'), connection: { db: 4, schema: 'svc_a' } },
      { kind: 'postgres', schema: 'svc_a' },
    ],
    [
      'a PostgreSQL backend whose schema is its connection’s',
      { backend: { connection: { schema: 'bullmq' } } },
      { kind: 'postgres', schema: 'bullmq' },
    ],
    [
      'a PostgreSQL backend with an empty schema: unreadable',
      { backend: new PostgresQueueBackend('') },
      { kind: 'unreadable', what: 'a BullMQ backend (PostgresQueueBackend) with no schema' },
    ],
    [
      'a PostgreSQL backend on the app’s pool: where its search_path finds BullMQ’s tables',
      { backend: appPoolBackend(fakePool('billing')), poolSchema: 'billing' },
      { kind: 'postgres', schema: 'billing' },
    ],
    [
      'on the app’s pool whose search_path finds none: unreadable (never `bullmq`)',
      { backend: appPoolBackend(fakePool(null)), poolSchema: null },
      {
        kind: 'unreadable',
        what:
          'a pg.Pool of the app’s given to a BullMQ backend (PostgresQueueBackend), whose ' +
          'search_path finds no BullMQ table',
      },
    ],
    [
      'on the app’s pool not asked: unreadable (never its `bullmq`)',
      { backend: appPoolBackend(fakePool('billing')) },
      {
        kind: 'unreadable',
        what:
          'a pg.Pool of the app’s given to a BullMQ backend (PostgresQueueBackend), whose ' +
          'schema was not read',
      },
    ],
    [
      'on a pool it made: its schema, whatever was asked',
      { backend: ownPoolBackend('svc_a'), poolSchema: 'other' },
      { kind: 'postgres', schema: 'svc_a' },
    ],
    [
      'another backend (no Redis client): unreadable, never database 0',
      { backend: new SqliteQueueBackend(), connection: { db: 0 } },
      { kind: 'unreadable', what: 'a BullMQ backend (SqliteQueueBackend)' },
    ],
  ])('%s', (_name, seen, store) => {
    expect(jobStoreOf(seen)).toEqual(store);
  });
});

describe('jobStore', () => {
  const job = { name: 'welcome', data: {}, queueName: 'emails', timestamp: 1 };
  it.each([
    ['no worker (a sandboxed job): database 0, as before', job, { kind: 'redis', db: 0 }],
    [
      'its worker’s options',
      { ...job, queue: { opts: { connection: { db: 2 } } } },
      { kind: 'redis', db: 2 },
    ],
    [
      'BullMQ 6: its backend’s live client (ioredis parsed the url)',
      {
        ...job,
        queue: {
          opts: { connection: { url: 'redis://redis/9' } },
          getBackend: () => new RedisQueueBackend(Promise.resolve(ioredisProxy({ db: 9 }))),
        },
      },
      { kind: 'redis', db: 9 },
    ],
    [
      'BullMQ 6 on GLIDE databaseId 3',
      {
        ...job,
        queue: {
          opts: { connection: new ValkeyGlideAdapter({ addresses: [], databaseId: 3 }) },
          getBackend: () =>
            new RedisQueueBackend(
              Promise.resolve(new ValkeyGlideAdapter({ addresses: [], databaseId: 3 })),
            ),
        },
      },
      { kind: 'redis', db: 3 },
    ],
    [
      'BullMQ 6 on PostgreSQL: its schema',
      {
        ...job,
        queue: {
          opts: { connection: { connectionString: 'postgres://db/app', schema: 'svc_b' } },
          getBackend: () => new PostgresQueueBackend('svc_b'),
        },
      },
      { kind: 'postgres', schema: 'svc_b' },
    ],
    [
      'BullMQ 5: its live client',
      { ...job, queue: { opts: {}, client: Promise.resolve(ioredisRaw({ db: '11' })) } },
      { kind: 'redis', db: 11 },
    ],
    [
      'a live client that failed: its options',
      {
        ...job,
        queue: {
          opts: { connection: { url: 'redis://redis/4' } },
          get client() {
            return Promise.reject(new Error('closed'));
          },
        },
      },
      { kind: 'redis', db: 4 },
    ],
    [
      'a backend that throws: its options',
      {
        ...job,
        queue: {
          opts: { connection: { db: 5 } },
          getBackend: () => {
            throw new Error('closed');
          },
        },
      },
      { kind: 'redis', db: 5 },
    ],
  ])('%s', async (_name, given, store) => {
    expect(await jobStore(given)).toEqual(store);
  });

  it('asks the app’s pool once, where BullMQ’s PostgreSQL backend runs on one (adversary 94)', async () => {
    const pool = fakePool('billing');
    const backend = appPoolBackend(pool);
    const queued = { ...job, queue: { opts: { connection: pool }, getBackend: () => backend } };
    expect(await jobStore(queued)).toEqual({ kind: 'postgres', schema: 'billing' });
    expect(await jobStore(queued)).toEqual({ kind: 'postgres', schema: 'billing' });
    expect(pool.asked).toBe(1);
  });

  it('asks again after a failure, which fails the job for now (not for good)', async () => {
    let fail = true;
    const pool = {
      query: () =>
        fail
          ? Promise.reject(new Error('connection refused'))
          : Promise.resolve({ rows: [{ schema: 'billing' }] }),
    };
    const queued = { ...job, queue: { getBackend: () => appPoolBackend(pool) } };
    await expect(jobStore(queued)).rejects.toThrow('connection refused');
    fail = false;
    expect(await jobStore(queued)).toEqual({ kind: 'postgres', schema: 'billing' });
  });
});

describe('searchPathSchema', () => {
  it.each([
    ['the schema it finds', [{ schema: 'billing' }], 'billing'],
    ['none found', [], null],
    ['an empty answer', [{ schema: '' }], null],
  ])('%s', async (_name, rows, schema) => {
    expect(await searchPathSchema({ query: () => Promise.resolve({ rows }) })).toBe(schema);
  });
});
