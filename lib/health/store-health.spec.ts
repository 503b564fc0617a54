import { storeHealth, type StoreReading } from './store-health.js';

describe('storeHealth', () => {
  const read = (
    oldestUnfinishedAgeMs: number | null,
    schemaPresent = true,
  ): Extract<StoreReading, { kind: 'read' }> => ({
    kind: 'read',
    schemaPresent,
    oldestUnfinishedAgeMs,
  });

  it.each<[string, StoreReading, boolean, string | undefined]>([
    ['no unfinished key', read(null), true, undefined],
    ['an unfinished key within the bound', read(59_999), true, undefined],
    ['an unfinished key exactly at the bound', read(60_000), true, undefined],
    [
      'a key held past the bound, its lease still renewed',
      read(60_001),
      false,
      'a key has been unfinished for longer than 60000 ms (maxUnfinishedAgeMs): its lease is ' +
        'still renewed: its work hangs',
    ],
    [
      'a key past the bound whose lease ran out',
      { ...read(null), oldestExpiredAgeMs: 60_001 },
      false,
      'a key has been unfinished for longer than 60000 ms (maxUnfinishedAgeMs): its lease ran ' +
        'out and no retry took it over: its worker died',
    ],
    [
      'both: the dead worker is said',
      { ...read(90_000), oldestExpiredAgeMs: 70_000 },
      false,
      'a key has been unfinished for longer than 60000 ms (maxUnfinishedAgeMs): its lease ran ' +
        'out and no retry took it over: its worker died',
    ],
    [
      'a lease run out within the bound',
      { ...read(null), oldestExpiredAgeMs: 59_000 },
      true,
      undefined,
    ],
    [
      'no table',
      read(null, false),
      false,
      "table idempotency_keys is missing: run the library's migrations (on a pg.Pool: " +
        "migrations/schema.sql; on TypeORM: IDEMPOTENCY_MIGRATIONS in the DataSource's " +
        'migrations)',
    ],
    [
      'no table, and none out of reach (unusableSchema null)',
      { ...read(null, false), unusableSchema: null, role: 'app' },
      false,
      "table idempotency_keys is missing: run the library's migrations (on a pg.Pool: " +
        "migrations/schema.sql; on TypeORM: IDEMPOTENCY_MIGRATIONS in the DataSource's " +
        'migrations)',
    ],
    [
      'the table in a schema of the search_path the role may not use',
      { ...read(null, false), unusableSchema: 'idem', role: 'app' },
      false,
      'the role app may not use schema idem, which holds idempotency_keys: ' +
        'GRANT USAGE ON SCHEMA idem TO app',
    ],
    [
      'a role that may only read the keys table',
      { ...read(null), missingPrivileges: ['INSERT', 'UPDATE', 'DELETE'], role: 'app' },
      false,
      'the role app may not INSERT, UPDATE, DELETE on idempotency_keys: ' +
        'GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO app',
    ],
    [
      'every privilege held',
      { ...read(null), missingPrivileges: [], role: 'app' },
      true,
      undefined,
    ],
    [
      'the store unreachable',
      { kind: 'unreachable', error: 'connect ECONNREFUSED' },
      false,
      'the idempotency store is unreachable',
    ],
  ])('%s: up %s', (_, reading, up, message) => {
    const health = storeHealth(reading, 60_000);
    expect(health.up).toBe(up);
    expect((health.data as { message?: string }).message).toBe(message);
  });

  it('says how old the oldest unfinished key is, up or down', () => {
    expect(storeHealth(read(1_000), 60_000).data).toEqual({ oldestUnfinishedAgeMs: 1_000 });
    expect(storeHealth(read(90_000), 60_000).data).toMatchObject({
      oldestUnfinishedAgeMs: 90_000,
      maxUnfinishedAgeMs: 60_000,
    });
  });
});
