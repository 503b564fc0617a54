import pg from 'pg';
import {
  resolveIdempotencyOptions as resolveWithTenant,
  resolveRouteOptions,
} from './idempotency-options.js';
import { type UncheckedIdempotencyModuleOptions } from './shapes/idempotency-options.interface.js';
import { MemoryClaimStore } from './testing/memory-claim.store.js';

/** The options as an app that declares one key space gives them. */
const resolveIdempotencyOptions = (options: UncheckedIdempotencyModuleOptions = {}) =>
  resolveWithTenant({ globalKeys: true, ...options });

describe('resolveIdempotencyOptions', () => {
  it('fills every default in', () => {
    const resolved = resolveIdempotencyOptions();
    expect(resolved).toMatchObject({
      headerName: 'Idempotency-Key',
      headerKey: 'idempotency-key',
      retentionMs: 86_400_000,
      databaseTimeoutMs: 5000,
      purgeIntervalMs: undefined,
      purgeBatchSize: 1000,
      replayCache: { size: 10_000, bytes: 33_554_432, ttlMs: 60_000 },
      route: {
        required: true,
        leaseMs: 5_000,
        conflictRetryAfterSeconds: 1,
        fingerprintHeaders: [],
        fingerprintQuery: false,
        heartbeat: true,
        atomic: true,
        json: { maxDepth: 64, maxNumberDigits: 1000, maxKeys: 10_000 },
        maxResponseBytes: 1_048_576,
      },
    });
    expect(resolved.tenant({ method: 'POST', url: '/', headers: {} })).toBe('0');
  });

  it.each(['none', 'session', 'transaction'] as const)('takes pooler: %s', (pooler) => {
    expect(resolveIdempotencyOptions({ pooler }).pooler).toBe(pooler);
  });

  it('lower-cases and sorts fingerprint headers', () => {
    const resolved = resolveIdempotencyOptions({ fingerprintHeaders: ['X-B', 'Accept'] });
    expect(resolved.route.fingerprintHeaders).toEqual(['accept', 'x-b']);
  });

  it.each<[string, UncheckedIdempotencyModuleOptions, string]>([
    ['zero lease', { leaseMs: 0 }, 'leaseMs must be a positive integer, got 0'],
    ['fractional lease', { leaseMs: 1.5 }, 'leaseMs must be a positive integer, got 1.5'],
    [
      'a 409 sent back at once',
      { conflictRetryAfterSeconds: 0 },
      'conflictRetryAfterSeconds must be a positive integer, got 0',
    ],
    ['negative retention', { retentionMs: -1 }, 'retentionMs must be a positive integer, got -1'],
    ['zero timeout', { databaseTimeoutMs: 0 }, 'databaseTimeoutMs must be a positive integer'],
    [
      'a pooler mode that is none',
      { pooler: 'statement' as 'transaction' },
      `pooler must be 'none', 'session' or 'transaction' (the pooler's mode), got "statement"`,
    ],
    ['zero purge interval', { purgeIntervalMs: 0 }, 'purgeIntervalMs must be a positive integer'],
    ['zero batch', { purgeBatchSize: 0 }, 'purgeBatchSize must be a positive integer'],
    ['negative cache size', { replayCacheSize: -1 }, 'replayCacheSize must be an integer >= 0'],
    ['zero cache TTL', { replayCacheTtlMs: 0 }, 'replayCacheTtlMs must be a positive integer'],
    ['nesting over the parser’s bound', { maxJsonDepth: 513 }, 'maxJsonDepth must be at most 512'],
    ['a claim wait past a minute', { claimWaitMs: 60_001 }, 'claimWaitMs must be at most 60000'],
    ['no claim wait', { claimWaitMs: 0 }, 'claimWaitMs must be a positive integer'],
    ['no digits', { maxJsonNumberDigits: 0 }, 'maxJsonNumberDigits must be a positive integer'],
    [
      'Set-Cookie replayed',
      { replayHeaders: ['Set-Cookie'] },
      'replayHeaders: "Set-Cookie" is never replayed',
    ],
    [
      'a hop-by-hop header replayed',
      { replayHeaders: ['Connection'] },
      'replayHeaders: "Connection" is never replayed',
    ],
    [
      'a bad header name replayed',
      { replayHeaders: ['a b'] },
      'replayHeaders: "a b" is not a header name',
    ],
    ['storeIf not a function', { storeIf: 5 as never }, 'storeIf must be a function'],
    [
      'renderProblem not a function',
      { renderProblem: {} as never },
      'renderProblem must be a function',
    ],
    [
      'no encryption keys',
      { encryption: { keys: [] } },
      'encryption.keys must list at least one key',
    ],
    [
      'a short key',
      { encryption: { keys: [{ id: 'a', key: Buffer.alloc(16) }] } },
      'encryption.keys: the key "a" is 16 bytes; AES-256 needs 32',
    ],
    [
      'an id used twice',
      {
        encryption: {
          keys: [
            { id: 'a', key: Buffer.alloc(32).toString('base64') },
            { id: 'a', key: Buffer.alloc(32) },
          ],
        },
      },
      'encryption.keys: the id "a" is used twice',
    ],
    [
      'abandoned keys dropped before finished ones',
      { retentionMs: 86_400_000, abandonedKeyRetentionMs: 3_600_000 },
      'abandonedKeyRetentionMs (3600000) must be at least retentionMs (86400000)',
    ],
    [
      'header with a space',
      { headerName: 'Idempotency Key' },
      'headerName "Idempotency Key" is not a header name',
    ],
    [
      'bad fingerprint header',
      { fingerprintHeaders: ['a:b'] },
      'fingerprintHeaders: "a:b" is not a header name',
    ],
    ['tenant not a function', { tenant: 'x' as never }, 'tenant must be a function'],
    [
      'the app database replaced by another store',
      { claimStores: { postgres: new MemoryClaimStore() } },
      'claimStores: "postgres" is the app\'s own database, and cannot be replaced',
    ],
    [
      'a claim store that is not one',
      { claimStores: { redis: { claim: () => undefined } as never } },
      'claimStores: "redis" is not a claim store (it has no takeOver, finish, release, ' +
        'extendLease, purgeBatch, purgeAbandonedBatch, oldestUnfinishedAgeMs, transactional)',
    ],
    [
      'a transactional claim store that cannot join a transaction',
      {
        claimStores: {
          mine: Object.assign(new MemoryClaimStore(), { transactional: true }) as never,
        },
      },
      'claimStores: "mine" says it is transactional but has no finishIn, commitPhase',
    ],
    [
      'a reserved header replayed',
      { replayHeaders: ['$body'] },
      'replayHeaders: "$body" is reserved (names starting with $ mark sealed responses and ' +
        'bodies stored by pointer)',
    ],
    [
      'an empty claim store name',
      { claimStore: '' },
      'claimStore must be the name of a claim store',
    ],
    [
      'no threshold for large responses',
      { largeResponses: { overBytes: 0 } },
      'largeResponses.overBytes must be a positive integer, got 0',
    ],
    [
      'a body store that is not one',
      { largeResponses: { overBytes: 1024, store: { get: () => undefined } as never } },
      'largeResponses.store is not a body store (it has no put, purgeBatch)',
    ],
    [
      'a partitioned expiry that is neither true nor an object',
      { partitionedExpiry: 'daily' as never },
      'partitionedExpiry must be true, false or { partitionMs?, partitionsAhead? }',
    ],
    [
      'partitions of no width',
      { partitionedExpiry: { partitionMs: 0 } },
      'partitionedExpiry.partitionMs must be a positive integer, got 0',
    ],
    [
      'partitions wider than the retention',
      { partitionedExpiry: { partitionMs: 90_000_000 } },
      'partitionedExpiry.partitionMs (90000000) must be at most retentionMs (86400000)',
    ],
    [
      'more than 100 partitions to a retention window',
      { partitionedExpiry: { partitionMs: 60_000 } },
      'partitionedExpiry.partitionMs (60000) must be at least 864000 (retentionMs / 100)',
    ],
    [
      'no partition ahead',
      { partitionedExpiry: { partitionsAhead: 0 } },
      'partitionedExpiry.partitionsAhead must be a positive integer, got 0',
    ],
    [
      'too many partitions ahead',
      { partitionedExpiry: { partitionsAhead: 101 } },
      'partitionedExpiry.partitionsAhead must be at most 100, got 101',
    ],
    [
      'a pool that is not a node-postgres Pool',
      { globalKeys: true, pool: { query: () => undefined } as never },
      'pool must be a node-postgres Pool (new Pool({ connectionString }) from pg), the one the ' +
        "app's data layer runs on",
    ],
    [
      'a pool and a TypeORM DataSource',
      { globalKeys: true, pool: new pg.Pool(), dataSource: 'orders' },
      'give either pool (a node-postgres Pool, for Prisma, Drizzle or Kysely) or dataSource (a ' +
        'TypeORM DataSource), not both',
    ],
    [
      'an isolation level PostgreSQL does not have',
      { isolationLevel: 'SNAPSHOT' as never },
      'isolationLevel: SNAPSHOT is not one of READ UNCOMMITTED, READ COMMITTED, REPEATABLE READ, SERIALIZABLE',
    ],
  ])('refuses %s at start-up', (_name, options, message) => {
    expect(() => resolveIdempotencyOptions(options)).toThrow(`IdempotencyModule: ${message}`);
  });

  it.each<[string, UncheckedIdempotencyModuleOptions, string | undefined]>([
    ['neither tenant nor globalKeys', {}, 'IdempotencyModule: tenant is required'],
    ['globalKeys: false', { globalKeys: false }, 'IdempotencyModule: tenant is required'],
    ['both', { tenant: () => 1, globalKeys: true }, 'give either tenant or globalKeys'],
    ['a tenant resolver', { tenant: () => 1 }, undefined],
    ['globalKeys: true', { globalKeys: true }, undefined],
  ])('tenants: %s', (_name, options, message) => {
    const resolve = () => resolveWithTenant(options);
    if (message) expect(resolve).toThrow(message);
    else expect(resolve).not.toThrow();
  });
});

describe('partitionedExpiry', () => {
  it.each<[string, UncheckedIdempotencyModuleOptions, unknown]>([
    ['off by default', {}, undefined],
    ['off', { partitionedExpiry: false }, undefined],
    ['on: 8 partitions to the retention, 2 ahead', { partitionedExpiry: true }, [10_800_000, 2]],
    ['a width of its own', { partitionedExpiry: { partitionMs: 3_600_000 } }, [3_600_000, 2]],
    [
      'a short retention, narrow partitions',
      { retentionMs: 4000, partitionedExpiry: { partitionMs: 2000, partitionsAhead: 3 } },
      [2000, 3],
    ],
    ['a week’s retention', { retentionMs: 604_800_000, partitionedExpiry: {} }, [75_600_000, 2]],
  ])('%s', (_name, options, expected) => {
    const { partitionedExpiry } = resolveIdempotencyOptions(options);
    expect(
      partitionedExpiry && [partitionedExpiry.partitionMs, partitionedExpiry.partitionsAhead],
    ).toEqual(expected);
  });
});

describe('resolveRouteOptions', () => {
  const base = resolveIdempotencyOptions({ leaseMs: 30_000, fingerprintHeaders: ['accept'] }).route;
  it.each([
    [
      {},
      {
        required: true,
        leaseMs: 30_000,
        fingerprintHeaders: ['accept'],
        heartbeat: true,
        atomic: true,
        json: { maxDepth: 64, maxNumberDigits: 1000, maxKeys: 10_000 },
        maxResponseBytes: 1_048_576,
      },
    ],
    [{ required: false }, { required: false, leaseMs: 30_000 }],
    [
      { leaseMs: 120_000, heartbeat: false },
      { leaseMs: 120_000, heartbeat: false },
    ],
    [{ fingerprintHeaders: [] }, { fingerprintHeaders: [] }],
    [{ conflictRetryAfterSeconds: 5 }, { conflictRetryAfterSeconds: 5, leaseMs: 30_000 }],
    [{ atomic: false }, { atomic: false, required: true }],
    [
      { replayHeaders: ['X-Request-Id'] },
      { storedHeaders: ['content-type', 'content-encoding', 'location', 'x-request-id'] },
    ],
    [{ maxJsonDepth: 8 }, { json: { maxDepth: 8, maxNumberDigits: 1000, maxKeys: 10_000 } }],
    [{ isolationLevel: 'SERIALIZABLE' as const }, { isolationLevel: 'SERIALIZABLE', atomic: true }],
  ])('overrides the module options with %j', (route, expected) => {
    expect(resolveRouteOptions(route, base)).toMatchObject(expected);
  });
});
