import {
  type CatalogColumn,
  checkMigrations,
  checkPartitionOwners,
  checkPartitions,
  checkPendingDetaches,
  checkPool,
  checkSchema,
  checkStuckKeys,
  checkSynchronousCommit,
  checkTimeout,
  type Finding,
  formatFindings,
  type PartitionBounds,
  type UnusableTable,
} from './doctor-checks.js';
import { EXPECTED_SCHEMA } from './expected-schema.js';

const complete: CatalogColumn[] = Object.entries(EXPECTED_SCHEMA).flatMap(([table, columns]) =>
  Object.entries(columns).map(([column, type]) => ({ table, column, type })),
);
const without = (table: string, column?: string) =>
  complete.filter((c) => c.table !== table || (column !== undefined && c.column !== column));
const retyped = (table: string, column: string, type: string) =>
  complete.map((c) => (c.table === table && c.column === column ? { ...c, type } : c));

describe('checkSchema', () => {
  it.each<[string, CatalogColumn[], boolean, Finding['level'], string]>([
    ['complete', complete, false, 'ok', '4 tables as the library expects (idempotency_keys plain)'],
    [
      'complete, partitioned, with placed_at',
      [
        ...complete,
        { table: 'idempotency_keys', column: 'placed_at', type: 'timestamp with time zone' },
      ],
      true,
      'ok',
      '4 tables as the library expects (idempotency_keys partitioned)',
    ],
    [
      'a table missing',
      without('message_failures'),
      false,
      'fail',
      "missing table message_failures: run the library's migrations (on a pg.Pool: " +
        "migrations/schema.sql; on TypeORM: IDEMPOTENCY_MIGRATIONS in the DataSource's " +
        'migrations)',
    ],
    [
      'a column missing',
      without('idempotency_keys', 'finished_at'),
      false,
      'fail',
      'idempotency_keys.finished_at (timestamp with time zone) is missing: run the ' +
        "library's pending migrations",
    ],
    [
      'a column of another type',
      retyped('idempotency_keys', 'tenant_id', 'bigint'),
      false,
      'fail',
      "idempotency_keys.tenant_id is bigint, not text: run the library's pending migrations",
    ],
  ])('%s', (_, columns, partitioned, level, message) => {
    expect(checkSchema(columns, partitioned)).toEqual({ level, topic: 'schema', message });
  });
});

describe('checkSchema, tables in a schema the role may not use', () => {
  const TABLES = Object.keys(EXPECTED_SCHEMA);
  const inIdem = TABLES.map((table) => ({ table, schema: 'idem' }));
  const usage = (schema: string, tables: string) =>
    `the role app may not use schema ${schema}, which holds ${tables}: ` +
    `GRANT USAGE ON SCHEMA ${schema} TO app`;
  it.each<[string, CatalogColumn[], UnusableTable[], string]>([
    [
      'every table in idem: the GRANT USAGE, not the migrations (in the library’s order)',
      complete,
      [...inIdem].reverse(),
      usage('idem', TABLES.join(', ')),
    ],
    [
      'two schemas: a GRANT each',
      complete,
      [
        { table: 'idempotency_keys', schema: 'idem' },
        { table: 'processed_messages', schema: 'consumers' },
        { table: 'message_failures', schema: 'idem' },
      ],
      `${usage('idem', 'idempotency_keys, message_failures')}; ` +
        usage('consumers', 'processed_messages'),
    ],
    [
      'out of reach and outdated: the GRANT, then the columns',
      without('idempotency_keys', 'finished_at'),
      inIdem,
      `${usage('idem', TABLES.join(', '))}; idempotency_keys.finished_at (timestamp with time ` +
        "zone) is missing: run the library's pending migrations",
    ],
    [
      'one out of reach, another missing altogether',
      without('message_failures'),
      [{ table: 'idempotency_keys', schema: 'idem' }],
      `${usage('idem', 'idempotency_keys')}; missing table message_failures: run the ` +
        "library's migrations (on a pg.Pool: migrations/schema.sql; on TypeORM: " +
        "IDEMPOTENCY_MIGRATIONS in the DataSource's migrations)",
    ],
  ])('%s', (_, columns, unusable, message) => {
    expect(checkSchema(columns, false, unusable, 'app')).toEqual({
      level: 'fail',
      topic: 'schema',
      message,
    });
  });
});

describe('checkMigrations', () => {
  const expected = ['A1', 'B2', 'C3'];
  it.each<[string, string[] | null, boolean, Finding['level'], RegExp]>([
    ['all run', ['A1', 'B2', 'C3'], true, 'ok', /^the library's 3 have run$/],
    ['all run, with the app’s own', ['X9', 'A1', 'B2', 'C3'], true, 'ok', /have run$/],
    ['one pending', ['A1', 'C3'], false, 'fail', /^1 of the library's 3 pending: B2 \(/],
    ['no table, schema incomplete', null, false, 'fail', /^no table "migrations": none of /],
    [
      'no table, schema complete (schema.sql)',
      null,
      true,
      'ok',
      /^no table "migrations", and none needed: the schema is complete/,
    ],
  ])('%s: %s', (_, run, schemaComplete, level, message) => {
    const finding = checkMigrations(run, expected, 'migrations', schemaComplete);
    expect(finding.level).toBe(level);
    expect(finding.message).toMatch(message);
  });

  it('no table reached, but one in a schema the role may not use: the GRANT USAGE', () => {
    expect(
      checkMigrations(null, expected, 'migrations', false, { role: 'app', schema: 'idem' }),
    ).toEqual({
      level: 'fail',
      topic: 'migrations',
      message:
        'the role app may not use schema idem, which holds migrations: ' +
        'GRANT USAGE ON SCHEMA idem TO app',
    });
  });
});

describe('checkSynchronousCommit', () => {
  it.each([
    ['on', 'ok'],
    ['local', 'ok'],
    ['remote_apply', 'ok'],
    ['off', 'fail'],
  ])('%s is %s', (value, level) => {
    expect(checkSynchronousCommit(value, 'app').level).toBe(level);
  });
  it('says how to turn it back on, in the database named', () => {
    expect(checkSynchronousCommit('off', 'shop').message).toMatch(
      /ALTER DATABASE shop RESET synchronous_commit$/,
    );
  });
});

describe('checkTimeout', () => {
  it.each<[number, number, Finding['level'], string]>([
    [0, 5_000, 'ok', 'none (the library bounds its own calls)'],
    [4_000, 5_000, 'ok', '4 s, within the lease (5 s)'],
    [5_000, 5_000, 'ok', '5 s, within the lease (5 s)'],
    [5_001, 5_000, 'fail', '5 s, longer than the lease (5 s)'],
    [30_000, 5_000, 'fail', '30 s, longer than the lease (5 s)'],
    [30_000, 60_000, 'ok', '30 s, within the lease (1 min)'],
  ])('%d ms against a %d ms lease: %s', (timeoutMs, leaseMs, level, start) => {
    const finding = checkTimeout('statement_timeout', timeoutMs, leaseMs);
    expect(finding.level).toBe(level);
    expect(finding.topic).toBe('statement_timeout');
    expect(finding.message.startsWith(start)).toBe(true);
  });
});

describe('checkPool', () => {
  it.each<[string, number, number, number | undefined, Finding['level'], RegExp]>([
    ['one pool of 10', 10, 1, undefined, 'ok', /^1 × 10 connections within max_connections 100/],
    [
      'ten pools of 10 fill the server',
      10,
      10,
      undefined,
      'fail',
      /^10 × 10 connections = 100, more/,
    ],
    ['nine pools of 10 fit', 10, 9, undefined, 'ok', /^9 × 10 connections within/],
    [
      'concurrency beyond the pool',
      10,
      1,
      11,
      'fail',
      /^11 requests at once on a pool of 10: .* so 1 wait/,
    ],
    ['concurrency within the pool', 10, 1, 10, 'ok', /, 10 requests at once$/],
  ])('%s', (_, poolSize, instances, concurrency, level, message) => {
    const finding = checkPool({ poolSize, instances, concurrency }, 100, 3);
    expect(finding.level).toBe(level);
    expect(finding.message).toMatch(message);
  });
});

describe('checkPartitionOwners', () => {
  const part = (
    owner: string | undefined,
    more: Partial<PartitionBounds> = {},
  ): PartitionBounds => ({
    fromAt: null,
    toAt: null,
    owner,
    keysOwnerMayDrop: owner === 'migrator',
    schema: 'public',
    keysOwnerMayCreate: true,
    ...more,
  });
  const owned = (...owners: (string | undefined)[]) => owners.map((owner) => part(owner));
  it.each<[string, string | undefined, PartitionBounds[], string | undefined]>([
    ['the owners not read', undefined, owned('api', 'worker'), undefined],
    ['no partitions', 'migrator', [], undefined],
    ["all the keys table's owner's", 'migrator', owned('migrator', 'migrator'), undefined],
    [
      "one app role's, beside the owner's: the owner's purge (a cron) may not drop them",
      'migrator',
      owned('migrator', 'app', 'app'),
      'warn',
    ],
    ['two app roles', 'migrator', owned('migrator', 'worker', 'api', 'api'), 'warn'],
    [
      "another role's that the owner may drop (it has that role's privileges)",
      'migrator',
      [part('migrator'), part('app', { keysOwnerMayDrop: true })],
      undefined,
    ],
    [
      'whether the owner may drop them not read: taken as not',
      'migrator',
      [part('app', { keysOwnerMayDrop: undefined })],
      'warn',
    ],
    ['an owner not read', 'migrator', [part(undefined)], undefined],
    [
      "another role's left pending detach: checkPendingDetaches's, not named here",
      'migrator',
      [part('migrator'), part('app', { detachPending: true })],
      undefined,
    ],
  ])('%s', (_name, keysOwner, partitions, level) => {
    expect(checkPartitionOwners(keysOwner, partitions)?.level).toBe(level);
  });

  it.each<[string, PartitionBounds[], string]>([
    [
      'the owner without CREATE on their schema: the GRANT',
      [part('worker', { schema: 'app', keysOwnerMayCreate: false }), part('api'), part('api')],
      "3 partitions owned by api, worker, which the keys table's owner migrator may not drop: " +
        'the purge of any other role deletes their expired keys row by row instead (dead ' +
        'tuples for vacuum) and leaves them attached for ever. To have them dropped: GRANT ' +
        "CREATE ON SCHEMA app TO migrator (PostgreSQL asks it of a table's new owner), after " +
        'which the app gives them to it when it next makes partitions (each role that may make ' +
        'partitions here may give them)',
    ],
    [
      'credentials rotated: a role that may make partitions may not give them, each by hand',
      [
        part('api_v1', {
          name: 'public.p1',
          keysOwnerMayCreate: false,
          mayNotGive: ['api_v2'],
        }),
      ],
      "1 partition owned by api_v1, which the keys table's owner migrator may not drop: the " +
        'purge of any other role deletes their expired keys row by row instead (dead tuples ' +
        'for vacuum) and leaves them attached for ever. To have them dropped: GRANT CREATE ON ' +
        'SCHEMA public TO migrator; ALTER TABLE public.p1 OWNER TO migrator (PostgreSQL asks ' +
        "the CREATE of a table's new owner; run them as a superuser, or the GRANT as the " +
        "schema's owner and the ALTERs as api_v1; for every object of that role in this " +
        'database at once, as a rotated role needs before it is dropped: REASSIGN OWNED BY ' +
        "api_v1 TO migrator). Only sessions of a partition's owner may give it, and api_v2 may " +
        'make partitions but not give this one: an app logging in as it (credentials rotated ' +
        'to a new role, a second app role) never gives it',
    ],
    [
      'the owner with it: an earlier release’s, given on the next run',
      [part('api')],
      "1 partition owned by api, which the keys table's owner migrator may not drop: the " +
        'purge of any other role deletes their expired keys row by row instead (dead tuples ' +
        'for vacuum) and leaves them attached for ever. To have them dropped: the app gives ' +
        "them to it when it next makes partitions (these are an earlier release's), or ALTER " +
        'TABLE ... OWNER TO migrator',
    ],
  ])('names the partitions and what to do: %s', (_name, partitions, message) => {
    expect(checkPartitionOwners('migrator', partitions)?.message).toBe(message);
  });

  // The statements are pasted as printed: a name SQL would not read bare is quoted in them.
  it.each<[string, string, PartitionBounds[], string]>([
    [
      'an owner with a dash, in the GRANT',
      'idem-owner',
      [part('api', { keysOwnerMayCreate: false })],
      'GRANT CREATE ON SCHEMA public TO "idem-owner" (',
    ],
    [
      'a schema with capitals, in the GRANT',
      'migrator',
      [part('api', { schema: 'Idem', keysOwnerMayCreate: false })],
      'GRANT CREATE ON SCHEMA "Idem" TO migrator (',
    ],
    [
      'an owner with capitals and a quote, in the ALTER',
      'Mi"grator',
      [part('api')],
      'ALTER TABLE ... OWNER TO "Mi""grator"',
    ],
  ])('quotes the names its statements need quoted: %s', (_name, keysOwner, partitions, sql) => {
    expect(checkPartitionOwners(keysOwner, partitions)?.message).toContain(sql);
  });
});

describe('checkPartitions', () => {
  const now = new Date('2026-12-01T12:00:00Z');
  const at = (iso: string | null) => (iso === null ? null : new Date(iso));
  const p = (from: string | null, to: string | null): PartitionBounds => ({
    fromAt: at(from),
    toAt: at(to),
  });
  it.each<[string, boolean, PartitionBounds[], Finding['level'], string]>([
    ['the plain table', false, [], 'ok', 'plain table (no partitioned expiry)'],
    [
      'two ahead of a short live one',
      true,
      [
        p(null, '2026-12-01T08:00:00Z'),
        p('2026-12-01T08:00:00Z', '2026-12-02T00:00:00Z'),
        p('2026-12-03T00:00:00Z', '2026-12-04T00:00:00Z'),
        p('2026-12-02T00:00:00Z', '2026-12-03T00:00:00Z'),
      ],
      'ok',
      '2 ahead of the live one, 1 d wide',
    ],
    [
      'none ahead',
      true,
      [p(null, '2026-12-01T08:00:00Z'), p('2026-12-01T08:00:00Z', '2026-12-02T00:00:00Z')],
      'fail',
      'none ahead of the live one: when it ends, claims wait while the next is made; ' +
        "the app's purge makes them ahead (partitionedExpiry): check that it runs",
    ],
    [
      'the live one pending detach: out of every query, so none covers the present',
      true,
      [
        { ...p('2026-12-01T08:00:00Z', '2026-12-02T00:00:00Z'), detachPending: true },
        p('2026-12-02T00:00:00Z', '2026-12-03T00:00:00Z'),
      ],
      'fail',
      'none covers the present: every claim waits while one is made; start the app with ' +
        'partitionedExpiry, whose purge makes them ahead',
    ],
    [
      'one ahead pending detach: not counted',
      true,
      [
        p('2026-12-01T08:00:00Z', '2026-12-02T00:00:00Z'),
        { ...p('2026-12-02T00:00:00Z', '2026-12-03T00:00:00Z'), detachPending: true },
        p('2026-12-03T00:00:00Z', '2026-12-04T00:00:00Z'),
      ],
      'ok',
      '1 ahead of the live one, 1 d wide',
    ],
    [
      'none covers the present',
      true,
      [p(null, '2026-12-01T08:00:00Z')],
      'fail',
      'none covers the present: every claim waits while one is made; start the app with ' +
        'partitionedExpiry, whose purge makes them ahead',
    ],
    [
      "a live one to MAXVALUE (or 'infinity', read alike)",
      true,
      [p('2026-12-01T00:00:00Z', null)],
      'fail',
      "the live one never ends (MAXVALUE or 'infinity'): no partition is made ahead once it is " +
        'live, and the expiry never drops it; the app refuses to start: detach it (the schema ' +
        'finding names it)',
    ],
    [
      'one ahead to MAXVALUE',
      true,
      [p('2026-12-01T00:00:00Z', '2026-12-07T13:00:00Z'), p('2026-12-07T13:00:00Z', null)],
      'fail',
      "one never ends (MAXVALUE or 'infinity'): no partition is made ahead once it is " +
        'live, and the expiry never drops it; the app refuses to start: detach it (the schema ' +
        'finding names it)',
    ],
  ])('%s', (_, partitioned, partitions, level, message) => {
    expect(checkPartitions(partitioned, partitions, now)).toEqual({
      level,
      topic: 'partitions',
      message,
    });
  });
});

describe('checkPendingDetaches', () => {
  const pending = (owner: string, more: Partial<PartitionBounds> = {}): PartitionBounds => ({
    fromAt: null,
    toAt: null,
    owner,
    keysOwnerMayDrop: owner === 'migrator',
    schema: 'public',
    keysOwnerMayCreate: false,
    name: `public.p_${owner}`,
    detachPending: true,
    ...more,
  });
  const api =
    'public.p_api has a detach left pending (an interrupted purge) and is owned by api, which ' +
    "the keys table's owner migrator may not drop: the purge of any other role leaves it " +
    'there, and while it is pending PostgreSQL detaches no other partition CONCURRENTLY, so ' +
    "every purge detaches expired ones under the table's lock instead (claims wait for it). " +
    'The purge of a session of api finishes and drops it; if none runs any more, as api or a ' +
    'superuser: ALTER TABLE idem.idempotency_keys DETACH PARTITION public.p_api FINALIZE; ' +
    'DROP TABLE public.p_api';
  it.each<[string, string | undefined, PartitionBounds[], string[]]>([
    ['the owners not read', undefined, [pending('api')], []],
    ['none pending', 'migrator', [pending('api', { detachPending: false })], []],
    ["the keys table's owner's: the next purge finishes it", 'migrator', [pending('migrator')], []],
    [
      "another role's that the owner may drop (it has that role's privileges)",
      'migrator',
      [pending('app', { keysOwnerMayDrop: true })],
      [],
    ],
    [
      "another role's the owner may not drop: named with its schema, and its remedy",
      'migrator',
      [pending('migrator', { detachPending: false }), pending('api')],
      [api],
    ],
    [
      'two: one line each',
      'migrator',
      [pending('api'), pending('jobs')],
      [api, api.replace(/api/g, 'jobs')],
    ],
  ])('%s', (_name, keysOwner, partitions, messages) => {
    expect(checkPendingDetaches(keysOwner, 'idem.idempotency_keys', partitions)).toEqual(
      messages.map((message) => ({ level: 'warn', topic: 'partitions', message })),
    );
  });
});

describe('checkStuckKeys', () => {
  it.each<[number, number | null, Finding['level'], string]>([
    [0, null, 'ok', 'none stuck (lease expired over 1 min ago)'],
    [
      3,
      2.5 * 3_600_000,
      'warn',
      '3 stuck: started, lease expired over 1 min ago, the oldest 2 h ago, no retry since ' +
        '(`keys list` shows them; a retry with the key takes it over and resumes)',
    ],
  ])('%d stuck', (stuck, oldest, level, message) => {
    expect(checkStuckKeys(stuck, oldest, 60_000)).toEqual({ level, topic: 'keys', message });
  });
});

describe('formatFindings', () => {
  const ok: Finding = { level: 'ok', topic: 'a', message: 'fine' };
  const warn: Finding = { level: 'warn', topic: 'b', message: 'look' };
  const fail: Finding = { level: 'fail', topic: 'c', message: 'broken' };
  it.each<[Finding[], string]>([
    [[ok], 'ok    a: fine\nNo problems found.\n'],
    [[ok, warn], 'ok    a: fine\nwarn  b: look\n0 problems, 1 warning.\n'],
    [
      [fail, fail, warn, warn],
      'FAIL  c: broken\nFAIL  c: broken\nwarn  b: look\nwarn  b: look\n2 problems, 2 warnings.\n',
    ],
  ])('%j', (findings, text) => {
    expect(formatFindings(findings)).toBe(text);
  });
});
