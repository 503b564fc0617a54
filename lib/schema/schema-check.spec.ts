import { defaultPartitionRemedy } from './default-partition-remedy.js';
import { netAheadRemedy } from './net-ahead-remedy.js';
import {
  type CatalogEntry,
  defaultPartitionProblem,
  hasPinnedSettings,
  missingSchema,
  partitionMakerProblem,
  schemaMessage,
  schemaRemedy,
  unboundedPartitionProblem,
} from './schema-check.js';
import {
  LAYOUT_NOT_PARTITIONED,
  LAYOUT_PARTITIONED_UNEXPECTED,
} from '../claim/partitioned/layout-errors.js';

const TZ = 'timestamp with time zone';
/** `name:type`, with `!` after the type for a column without a DEFAULT it needs. */
const columns = (spec: string): { name: string; type: string; hasDefault: boolean }[] =>
  spec.split(',').map((pair) => {
    const [name, written] = pair.trim().split(':');
    const type = written.replace('!', '');
    return { name, type: type === 'tz' ? TZ : type, hasDefault: !written.endsWith('!') };
  });
/** The primary keys the migrations make, by table. */
const UNIQUES: Record<string, string[][]> = {
  idempotency_keys: [['key', 'tenant_id']],
  processed_messages: [['consumer', 'message_id']],
  message_failures: [['consumer', 'message_id']],
  idempotency_response_bodies: [['id']],
};
const KEY_COLUMNS =
  'tenant_id:text, key:text, fingerprint:bytea, state:text, recovery_point:text, ' +
  'locked_until:tz, lock_version:bigint, response_code:integer, response_body:bytea, ' +
  'created_at:tz, claim_id:uuid, response_headers:jsonb, phase_results:jsonb, finished_at:tz, ' +
  'leased_at:tz';
const table = (
  name: string,
  spec: string,
  relkind = 'r',
  uniques = relkind === 'p' ? [] : UNIQUES[name],
  missingPrivileges: string[] = [],
): CatalogEntry => ({
  kind: 'table',
  name,
  relkind,
  columns: columns(spec),
  uniques,
  missingPrivileges,
  role: 'app',
});
const keys = table('idempotency_keys', KEY_COLUMNS);
const processed = table('processed_messages', 'consumer:text, message_id:text, processed_at:tz');
const failures = table(
  'message_failures',
  'consumer:text, message_id:text, attempts:integer, last_error:text, last_failed_at:tz',
);
const bodies = table(
  'idempotency_response_bodies',
  'id:uuid, tenant_id:text, key:text, claim_id:uuid, body:bytea, created_at:tz, expires_at:tz',
);
const partitionedKeys = table('idempotency_keys', `${KEY_COLUMNS}, placed_at:tz`, 'p');
/** A table with the DEFAULT partition the catalog query names (null: none). */
const withDefault = (entry: CatalogEntry, partition: string | null): CatalogEntry =>
  entry.kind === 'table' ? { ...entry, defaultPartition: partition } : entry;
const PINNED = ['DateStyle=ISO, YMD', 'TimeZone=UTC'];
const fn = (name: string, settings: string[] | null = null): CatalogEntry => ({
  kind: 'function',
  name,
  settings,
});
const partitionFunctions = [
  fn('idempotency_claim'),
  fn('idempotency_keys_create_partitions', PINNED),
  fn('idempotency_key_partitions', PINNED),
];
/** The functions as an earlier PartitionIdempotencyKeys made them: no settings of their own. */
const unpinnedFunctions = [
  fn('idempotency_claim'),
  fn('idempotency_keys_create_partitions'),
  fn('idempotency_key_partitions'),
];
const complete = [keys, processed, failures, bodies];
/** The entry as the catalog query gives it from a schema the role may not use. */
const inUnusable = (schema: string, entry: CatalogEntry, role = 'app'): CatalogEntry => ({
  ...entry,
  role,
  unusableSchema: schema,
});
const usage = (schema: string, holds: string) =>
  `the role app may not use schema ${schema}, which holds ${holds}: ` +
  `GRANT USAGE ON SCHEMA ${schema} TO app`;
const plain = { partitioned: false, bodies: false };
const withBodies = { partitioned: false, bodies: true };
const partitioned = { partitioned: true, bodies: false };

describe('missingSchema', () => {
  it.each<[string, { partitioned: boolean; bodies: boolean }, CatalogEntry[], string[]]>([
    ['every migration ran', plain, complete, []],
    ['every migration ran, bodies used', withBodies, complete, []],
    ['no bodies table, bodies not used', plain, [keys, processed, failures], []],
    [
      'nothing at all (the migrations never ran)',
      plain,
      [],
      [
        'table idempotency_keys is missing (migration CreateIdempotencyKeys1764460800000)',
        'table processed_messages is missing (migration CreateProcessedMessages1764460900000)',
        'table message_failures is missing (migration CreateMessageFailures1764461400000)',
      ],
    ],
    [
      'the bodies table missing with largeResponses',
      withBodies,
      [keys, processed, failures],
      [
        'table idempotency_response_bodies is missing (migration CreateResponseBodies1764461500000)',
      ],
    ],
    [
      'the failure counts missing (the consumer side)',
      plain,
      [keys, processed],
      ['table message_failures is missing (migration CreateMessageFailures1764461400000)'],
    ],
    [
      'finished_at missing (an outdated schema)',
      plain,
      [table('idempotency_keys', KEY_COLUMNS.replace(', finished_at:tz', '')), processed, failures],
      ['column idempotency_keys.finished_at is missing (migration AddFinishedAt1764461200000)'],
    ],
    [
      'leased_at missing (AddLeasedAt not run: health would age a step from its first)',
      plain,
      [table('idempotency_keys', KEY_COLUMNS.replace(', leased_at:tz', '')), processed, failures],
      ['column idempotency_keys.leased_at is missing (migration AddLeasedAt1764461700000)'],
    ],
    [
      'tenant ids still bigint',
      plain,
      [
        table('idempotency_keys', KEY_COLUMNS.replace('tenant_id:text', 'tenant_id:bigint')),
        processed,
        failures,
      ],
      [
        'column idempotency_keys.tenant_id is bigint, not text (migration TextTenantIds1764461300000)',
      ],
    ],
    [
      'a column of a table’s own migration dropped',
      plain,
      [keys, table('processed_messages', 'consumer:text, message_id:text'), failures],
      [
        'column processed_messages.processed_at is missing (migration CreateProcessedMessages1764460900000)',
      ],
    ],
    [
      'the keys table without its primary key',
      plain,
      [table('idempotency_keys', KEY_COLUMNS, 'r', []), processed, failures],
      [
        'idempotency_keys has no primary key or unique index on (tenant_id, key), which the ' +
          "library's ON CONFLICT needs (migration CreateIdempotencyKeys1764460800000)",
      ],
    ],
    [
      'the keys table with a unique index on more columns only',
      plain,
      [
        table('idempotency_keys', KEY_COLUMNS, 'r', [['key', 'tenant_id', 'fingerprint']]),
        processed,
        failures,
      ],
      [
        'idempotency_keys has no primary key or unique index on (tenant_id, key), which the ' +
          "library's ON CONFLICT needs (migration CreateIdempotencyKeys1764460800000)",
      ],
    ],
    [
      'the keys table with a unique index in the other column order',
      plain,
      [table('idempotency_keys', KEY_COLUMNS, 'r', [['tenant_id', 'key']]), processed, failures],
      [],
    ],
    [
      'message_failures without its primary key',
      plain,
      [
        keys,
        processed,
        table(
          'message_failures',
          'consumer:text, message_id:text, attempts:integer, last_error:text, last_failed_at:tz',
          'r',
          [],
        ),
      ],
      [
        'message_failures has no primary key or unique index on (consumer, message_id), which ' +
          "the library's ON CONFLICT needs (migration CreateMessageFailures1764461400000)",
      ],
    ],
    [
      'claim_id without its DEFAULT',
      plain,
      [
        table('idempotency_keys', KEY_COLUMNS.replace('claim_id:uuid', 'claim_id:uuid!')),
        processed,
        failures,
      ],
      [
        'column idempotency_keys.claim_id has no DEFAULT, which the insert needs ' +
          '(migration CreateIdempotencyKeys1764460800000)',
      ],
    ],
    [
      'a column the inserts write needs no DEFAULT (fingerprint)',
      plain,
      [
        table('idempotency_keys', KEY_COLUMNS.replace('fingerprint:bytea', 'fingerprint:bytea!')),
        processed,
        failures,
      ],
      [],
    ],
    [
      'partitioned, claim_id and placed_at without their DEFAULTs',
      partitioned,
      [
        table(
          'idempotency_keys',
          `${KEY_COLUMNS.replace('claim_id:uuid', 'claim_id:uuid!')}, placed_at:tz!`,
          'p',
        ),
        processed,
        failures,
        ...partitionFunctions,
      ],
      [
        'column idempotency_keys.claim_id has no DEFAULT, which the insert needs ' +
          '(migration CreateIdempotencyKeys1764460800000)',
        'column idempotency_keys.placed_at has no DEFAULT, which the insert needs ' +
          '(migration PartitionIdempotencyKeys1764461600000)',
      ],
    ],
    [
      'bodies without the id DEFAULT',
      withBodies,
      [
        keys,
        processed,
        failures,
        table(
          'idempotency_response_bodies',
          'id:uuid!, tenant_id:text, key:text, claim_id:uuid, body:bytea, created_at:tz, expires_at:tz',
        ),
      ],
      [
        'column idempotency_response_bodies.id has no DEFAULT, which the insert needs ' +
          '(migration CreateResponseBodies1764461500000)',
      ],
    ],
    [
      'a role that may only read',
      plain,
      [
        table('idempotency_keys', KEY_COLUMNS, 'r', undefined, ['INSERT', 'UPDATE', 'DELETE']),
        processed,
        table(
          'message_failures',
          'consumer:text, message_id:text, attempts:integer, last_error:text, last_failed_at:tz',
          'r',
          undefined,
          ['DELETE'],
        ),
      ],
      [
        'the role app may not INSERT, UPDATE, DELETE on idempotency_keys: ' +
          'GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO app',
        'the role app may not DELETE on message_failures: ' +
          'GRANT SELECT, INSERT, UPDATE, DELETE ON message_failures TO app',
      ],
    ],
    [
      'every table in a schema of the search_path the role may not use',
      plain,
      [processed, failures, keys].map((entry) => inUnusable('idem', entry)),
      [usage('idem', 'idempotency_keys, processed_messages, message_failures')],
    ],
    [
      'a table resolved is checked as is: no USAGE problem (unusableSchema null)',
      plain,
      [{ ...keys, unusableSchema: null }, processed, failures],
      [],
    ],
    [
      'the keys table alone in the unusable schema, bodies used',
      withBodies,
      [inUnusable('idem', keys), processed, failures, bodies],
      [usage('idem', 'idempotency_keys')],
    ],
    [
      'two unusable schemas: one GRANT each, in the order of the tables',
      plain,
      [inUnusable('consumers', processed), inUnusable('idem', keys), inUnusable('idem', failures)],
      [
        usage('idem', 'idempotency_keys, message_failures'),
        usage('consumers', 'processed_messages'),
      ],
    ],
    [
      'no USAGE and no write privileges: both GRANTs at once',
      plain,
      [
        inUnusable(
          'idem',
          table('idempotency_keys', KEY_COLUMNS, 'r', undefined, ['INSERT', 'UPDATE', 'DELETE']),
        ),
        processed,
        failures,
      ],
      [
        usage('idem', 'idempotency_keys'),
        'the role app may not INSERT, UPDATE, DELETE on idempotency_keys: ' +
          'GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO app',
      ],
    ],
    [
      'no USAGE, and a table of the unusable schema outdated: the column too',
      plain,
      [
        inUnusable('idem', table('idempotency_keys', KEY_COLUMNS.replace(', finished_at:tz', ''))),
        processed,
        failures,
      ],
      [
        usage('idem', 'idempotency_keys'),
        'column idempotency_keys.finished_at is missing (migration AddFinishedAt1764461200000)',
      ],
    ],
    [
      'no USAGE on one schema, another table missing altogether',
      plain,
      [inUnusable('idem', keys), processed],
      [
        usage('idem', 'idempotency_keys'),
        'table message_failures is missing (migration CreateMessageFailures1764461400000)',
      ],
    ],
    [
      'partitioned, the table and its functions in the unusable schema',
      partitioned,
      [partitionedKeys, processed, failures, ...partitionFunctions].map((entry) =>
        inUnusable('idem', entry),
      ),
      [
        usage(
          'idem',
          'idempotency_keys, processed_messages, message_failures, idempotency_claim(), ' +
            'idempotency_keys_create_partitions(), idempotency_key_partitions()',
        ),
      ],
    ],
    [
      'partitioned, only a function in the unusable schema',
      partitioned,
      [
        partitionedKeys,
        processed,
        failures,
        fn('idempotency_claim'),
        inUnusable('idem', fn('idempotency_keys_create_partitions', PINNED)),
        fn('idempotency_key_partitions', PINNED),
      ],
      [usage('idem', 'idempotency_keys_create_partitions()')],
    ],
    [
      'a schema and a role that a GRANT must quote',
      plain,
      [inUnusable('Idem Keys', keys, 'App-User'), processed, failures],
      [
        'the role App-User may not use schema Idem Keys, which holds idempotency_keys: ' +
          'GRANT USAGE ON SCHEMA "Idem Keys" TO "App-User"',
      ],
    ],
    [
      'a role a GRANT must quote that may only read',
      plain,
      [{ ...table('idempotency_keys', KEY_COLUMNS, 'r', undefined, ['DELETE']), role: 'Ops' }],
      [
        'the role Ops may not DELETE on idempotency_keys: ' +
          'GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO "Ops"',
        'table processed_messages is missing (migration CreateProcessedMessages1764460900000)',
        'table message_failures is missing (migration CreateMessageFailures1764461400000)',
      ],
    ],
    [
      'partitioned, as configured',
      partitioned,
      [partitionedKeys, processed, failures, ...partitionFunctions],
      [],
    ],
    [
      'partitionedExpiry on a plain table',
      partitioned,
      complete,
      [
        'column idempotency_keys.placed_at is missing (migration PartitionIdempotencyKeys1764461600000)',
        LAYOUT_NOT_PARTITIONED,
      ],
    ],
    [
      'a partitioned table without partitionedExpiry',
      plain,
      [partitionedKeys, processed, failures],
      [LAYOUT_PARTITIONED_UNEXPECTED],
    ],
    [
      'partitioned, a function dropped',
      partitioned,
      [partitionedKeys, processed, failures, fn('idempotency_key_partitions', PINNED)],
      [
        'function idempotency_claim() is missing (migration PartitionIdempotencyKeys1764461600000)',
        'function idempotency_keys_create_partitions() is missing (migration PartitionIdempotencyKeys1764461600000)',
      ],
    ],
    [
      'partitioned, the bound functions of an earlier PartitionIdempotencyKeys (adversary 108)',
      partitioned,
      [partitionedKeys, processed, failures, ...unpinnedFunctions],
      [
        "function idempotency_keys_create_partitions() reads partition bounds in the session's " +
          'DateStyle and TimeZone (migration PinPartitionFunctions1764461800000)',
        "function idempotency_key_partitions() reads partition bounds in the session's " +
          'DateStyle and TimeZone (migration PinPartitionFunctions1764461800000)',
      ],
    ],
    [
      "partitioned, with an operator's DEFAULT partition (adversary 108)",
      partitioned,
      [
        withDefault(partitionedKeys, 'idempotency_keys_default'),
        processed,
        failures,
        ...partitionFunctions,
      ],
      [defaultPartitionProblem('idempotency_keys_default')],
    ],
    [
      'a plain table: no default partition, no functions asked for',
      plain,
      [withDefault(keys, null), processed, failures],
      [],
    ],
  ])('%s', (_name, needs, catalog, expected) => {
    expect(missingSchema(needs, catalog)).toEqual(expected);
  });
});

describe('hasPinnedSettings', () => {
  it.each<[string, string[] | null, boolean]>([
    ['both, as PostgreSQL prints them', ['DateStyle=ISO, YMD', 'TimeZone=UTC'], true],
    ['both, another order and case', ['timezone=UTC', 'datestyle=ISO, YMD'], true],
    ['with another setting too', ['search_path=idem', 'DateStyle=ISO, YMD', 'TimeZone=UTC'], true],
    ['none (an earlier PartitionIdempotencyKeys)', null, false],
    ['none, empty', [], false],
    ['the date style alone', ['DateStyle=ISO, YMD'], false],
    ['the zone alone', ['TimeZone=UTC'], false],
    ['another zone', ['DateStyle=ISO, YMD', 'TimeZone=Asia/Kolkata'], false],
    ['another date style', ['DateStyle=German, DMY', 'TimeZone=UTC'], false],
  ])('%s', (_name, settings, expected) => {
    expect(hasPinnedSettings(settings)).toBe(expected);
  });
});

describe('defaultPartitionProblem', () => {
  it('says how to keep its keys and drop it, naming it as SQL takes it', () => {
    expect(defaultPartitionProblem('"Keys Default"')).toBe(
      'idempotency_keys has a DEFAULT partition ("Keys Default"), which the partitioned expiry ' +
        'cannot expire: the library makes the partitions ahead itself. Its keys are answered ' +
        'requests (dropped, their retries would run again): move them to range partitions of ' +
        'their own, which the expiry drops in time, and drop it, in one transaction: ' +
        defaultPartitionRemedy('"Keys Default"'),
    );
  });

  it('is said alone, without the migrations (they would not help)', () => {
    const problem = defaultPartitionProblem('idempotency_keys_default');
    expect(schemaMessage([problem])).toBe(
      "IdempotencyModule: the app's database lacks what the library needs:\n" + `- ${problem}\n`,
    );
  });
});

describe('schemaMessage', () => {
  it('names only the GRANTs when only privileges are missing', () => {
    expect(
      schemaMessage([
        'the role app may not INSERT on t: GRANT SELECT, INSERT, UPDATE, DELETE ON t TO app',
      ]),
    ).toBe(
      "IdempotencyModule: the app's database lacks what the library needs:\n" +
        '- the role app may not INSERT on t: GRANT SELECT, INSERT, UPDATE, DELETE ON t TO app\n',
    );
  });

  it('names only the GRANT USAGE when only a schema is out of reach', () => {
    expect(
      schemaMessage([
        'the role app may not use schema idem, which holds t: GRANT USAGE ON SCHEMA idem TO app',
      ]),
    ).toBe(
      "IdempotencyModule: the app's database lacks what the library needs:\n" +
        '- the role app may not use schema idem, which holds t: GRANT USAGE ON SCHEMA idem TO app\n',
    );
  });

  it('lists what is missing and names the ways to create it', () => {
    expect(
      schemaMessage(['table a is missing (migration A1)', 'table b is missing (migration B2)']),
    ).toBe(
      "IdempotencyModule: the app's database lacks what the library needs:\n" +
        '- table a is missing (migration A1)\n' +
        '- table b is missing (migration B2)\n' +
        "Run the library's migrations in the app's DataSource (migrations: " +
        '[...IDEMPOTENCY_MIGRATIONS, ...yours], then migrationsRun: true or `typeorm migration:run`; ' +
        'with partitionedExpiry, PartitionIdempotencyKeys1764461600000 after them), or apply the ' +
        "package's migrations/schema.sql with your own migration tool.",
    );
  });
});

describe('missingSchema: what a partitioned layout the functions cannot work with lacks', () => {
  const needs = { partitioned: true, bodies: false };
  const keysWith = (facts: Partial<Extract<CatalogEntry, { kind: 'table' }>>): CatalogEntry =>
    ({ ...partitionedKeys, ...facts }) as CatalogEntry;
  const owned = { owner: 'app', mayOwn: true, schema: 'public', mayCreate: true };
  it.each<[string, CatalogEntry, string[]]>([
    ['owned, no partition without an end', keysWith({ ...owned, unboundedPartitions: [] }), []],
    [
      'a partition up to MAXVALUE or infinity',
      keysWith({ ...owned, unboundedPartitions: ['public.idempotency_keys_rest'] }),
      [unboundedPartitionProblem('public.idempotency_keys_rest', 'public')],
    ],
    [
      'a role not the owner, without CREATE on the schema',
      keysWith({ owner: 'migrator', mayOwn: false, makesIn: 'public', mayCreate: false }),
      [
        partitionMakerProblem({
          role: 'app',
          owner: 'migrator',
          mayOwn: false,
          makesIn: 'public',
          mayCreate: false,
        })!,
      ],
    ],
    ['a catalog that does not say (an older query)', partitionedKeys, []],
  ])('%s', (_name, keysEntry, expected) => {
    expect(missingSchema(needs, [keysEntry, processed, failures, ...partitionFunctions])).toEqual(
      expected,
    );
  });

  /** Bounds as `PARTITION_BOUNDS_QUERY` reads them: now, and a limit of 100 s. */
  const now = Date.parse('2026-12-07T12:00:00Z');
  const bounds = (...partitions: [string, number | null, number | null][]) => ({
    nowMs: now,
    limitMs: 100_000,
    partitions: partitions.map(([partition, fromMs, toMs]) => ({ partition, fromMs, toMs })),
  });
  const rest = 'public.idempotency_keys_rest';
  const far = new Date(now + 200_000).toISOString();
  const aheadStart = new Date(now + 1).toISOString();
  it.each<[string, string[], ReturnType<typeof bounds> | undefined, string[]]>([
    [
      'bounds not read: the remedy for a live net',
      [rest],
      undefined,
      [unboundedPartitionProblem(rest, 'public')],
    ],
    [
      'MAXVALUE, already live: given an end',
      [rest],
      bounds([rest, now - 1, null]),
      [unboundedPartitionProblem(rest, 'public')],
    ],
    [
      'MAXVALUE, all ahead: dropped',
      [rest],
      bounds([rest, now + 1, null]),
      [unboundedPartitionProblem(rest, 'public', { startsAhead: true, start: aheadStart })],
    ],
    [
      'a far date, all ahead',
      [],
      bounds([rest, now + 1, now + 200_000]),
      [
        unboundedPartitionProblem(rest, 'public', {
          end: far,
          startsAhead: true,
          start: aheadStart,
        }),
      ],
    ],
    [
      'a far date, already live',
      [],
      bounds([rest, now - 1, now + 200_000]),
      [unboundedPartitionProblem(rest, 'public', { end: far })],
    ],
    ['partitions made ahead, within the limit', [], bounds(['public.p', now, now + 100_000]), []],
  ])('%s', (_name, unboundedPartitions, read, expected) => {
    const keysEntry = keysWith({ ...owned, unboundedPartitions });
    expect(
      missingSchema(needs, [keysEntry, processed, failures, ...partitionFunctions], read),
    ).toEqual(expected);
  });

  it('is not asked of a plain table', () => {
    const plainKeys = { ...keys, mayOwn: false, mayCreate: false } as CatalogEntry;
    expect(
      missingSchema({ partitioned: false, bodies: false }, [plainKeys, processed, failures]),
    ).toEqual([]);
  });
});

describe('unboundedPartitionProblem', () => {
  it('says to give it an end (its keys kept) or drop it if empty, naming it as SQL takes it', () => {
    expect(unboundedPartitionProblem('public."Keys Rest"')).toBe(
      'idempotency_keys has a partition without an end (public."Keys Rest", up to MAXVALUE or ' +
        "'infinity'), which the partitioned expiry cannot expire: once the present reaches it no " +
        'partition is made ahead and its keys stay for ever; the library makes the partitions ' +
        'ahead itself. Give it an end: ALTER TABLE idempotency_keys DETACH PARTITION ' +
        'public."Keys Rest"; ALTER TABLE idempotency_keys ATTACH PARTITION public."Keys Rest" ' +
        'FOR VALUES FROM (<its start>) TO (now()) (its keys kept, it expires with the others), ' +
        'or, if it holds no key, DROP TABLE public."Keys Rest" after the DETACH',
    );
  });

  it('says how to be rid of one whose range is all ahead, whenever it is run (adversary 113)', () => {
    const layout = { partitionMs: 900_000, partitionsAhead: 2 };
    expect(
      unboundedPartitionProblem('idem.rest', 'idem', {
        startsAhead: true,
        start: '2026-12-07T12:45:00.000Z',
        layout,
      }),
    ).toBe(
      'idempotency_keys has a partition without an end (idem.rest, up to MAXVALUE or ' +
        "'infinity'), which the partitioned expiry cannot expire: once the present reaches it no " +
        'partition is made ahead and its keys stay for ever; the library makes the partitions ' +
        'ahead itself. Its range is all ahead, so it holds no key yet, but keys land in it once ' +
        'the present reaches its start (2026-12-07T12:45:00.000Z): run, as one transaction, what ' +
        'drops it while it holds no key and else gives it an end past its last key (its keys ' +
        'kept, it expires with the others) and makes the partitions ahead from there: ' +
        netAheadRemedy('idem.rest', 'idem', layout) +
        " (it waits for the keys table's lock a little at a time, letting claims through; if " +
        'it fails on the lock, run it again, and not while a backup runs)',
    );
  });

  it('says the far end of one up to a date', () => {
    expect(
      unboundedPartitionProblem('r', undefined, { end: '9999-12-31T00:00:00.000Z' }),
    ).toContain(
      'idempotency_keys has a partition without an end in reach (r, up to ' +
        '9999-12-31T00:00:00.000Z, further ahead than any partition the library makes)',
    );
  });

  it('names the keys table with its schema when given', () => {
    expect(unboundedPartitionProblem('idem.rest', 'idem')).toContain(
      'ALTER TABLE idem.idempotency_keys DETACH PARTITION idem.rest; ALTER TABLE ' +
        'idem.idempotency_keys ATTACH PARTITION idem.rest FOR VALUES',
    );
  });
});

describe('partitionMakerProblem', () => {
  const base = { role: 'app', owner: 'migrator', makesIn: 'idem' };
  it.each<[string, boolean | null | undefined, boolean | null | undefined, string | undefined]>([
    ['the owner (or a member), with CREATE', true, true, undefined],
    ['not said (an older catalog query)', undefined, null, undefined],
    [
      'not the owner',
      false,
      true,
      "the role app may not make the partitions ahead, which the partitioned expiry makes from the app's " +
        'sessions (ATTACH PARTITION to idempotency_keys, which only its owner migrator may): ' +
        "GRANT migrator TO app (or log the app in as the table's owner)",
    ],
    [
      'without CREATE on the schema',
      true,
      false,
      "the role app may not make the partitions ahead, which the partitioned expiry makes from the app's " +
        'sessions (CREATE TABLE in schema idem, the first of its search_path): GRANT CREATE ON ' +
        'SCHEMA idem TO app ' +
        "(or log the app in as the table's owner)",
    ],
    [
      'neither',
      false,
      false,
      "the role app may not make the partitions ahead, which the partitioned expiry makes from the app's " +
        'sessions (ATTACH PARTITION to idempotency_keys, which only its owner migrator may; ' +
        'CREATE TABLE in schema idem, the first of its search_path): GRANT migrator TO app; ' +
        'GRANT CREATE ON SCHEMA idem TO app ' +
        "(or log the app in as the table's owner)",
    ],
  ])('%s', (_name, mayOwn, mayCreate, expected) => {
    expect(partitionMakerProblem({ ...base, mayOwn, mayCreate })).toBe(expected);
  });

  it.each([
    ['PostgreSQL 15', 150020, 'ALTER ROLE app INHERIT'],
    ['PostgreSQL 16', 160004, 'GRANT migrator TO app WITH INHERIT TRUE'],
  ])(
    'a NOINHERIT member of the owner, on %s, is told how to inherit, not the grant it has',
    (_name, serverVersion, statement) => {
      expect(
        partitionMakerProblem({
          ...base,
          mayOwn: false,
          memberOfOwner: true,
          serverVersion,
          mayCreate: true,
        }),
      ).toBe(
        "the role app may not make the partitions ahead, which the partitioned expiry makes from the app's " +
          'sessions (ATTACH PARTITION to idempotency_keys, which only its owner migrator may: app ' +
          `is a member without its privileges (NOINHERIT)): ${statement} ` +
          "(or log the app in as the table's owner)",
      );
    },
  );

  it('says so where no schema of the search path exists to make them in', () => {
    expect(partitionMakerProblem({ ...base, makesIn: null, mayOwn: true, mayCreate: false })).toBe(
      "the role app may not make the partitions ahead, which the partitioned expiry makes from the app's " +
        'sessions (CREATE TABLE: no schema of its search_path exists): ALTER ROLE app SET ' +
        "search_path = <the keys table's schema> (or log the app in as the table's owner)",
    );
  });

  it('is said alone, without the migrations (they would not help)', () => {
    const problem = partitionMakerProblem({ ...base, mayOwn: false, mayCreate: true })!;
    expect(schemaRemedy([problem])).toBe('');
  });
});

describe('schemaRemedy', () => {
  const migrations =
    "Run the library's migrations in the app's DataSource (migrations: " +
    '[...IDEMPOTENCY_MIGRATIONS, ...yours], then migrationsRun: true or `typeorm migration:run`; ' +
    'with partitionedExpiry, PartitionIdempotencyKeys1764461600000 after them)';
  const schemaSql = "apply the package's migrations/schema.sql with your own migration tool";
  const partitionedOnce =
    'The partitioned layout is not in schema.sql: without TypeORM migrations, run ' +
    'PartitionIdempotencyKeys1764461600000 and PinPartitionFunctions1764461800000 once with a ' +
    "DataSource of their own (new DataSource({ type: 'postgres', url, migrations: " +
    '[PartitionIdempotencyKeys1764461600000, PinPartitionFunctions1764461800000] }), then ' +
    'initialize() and runMigrations(); see docs/operations/partitioned-expiry.md).';
  const unpinned =
    "function idempotency_key_partitions() reads partition bounds in the session's DateStyle " +
    'and TimeZone (migration PinPartitionFunctions1764461800000)';
  it.each<[string, string[], string]>([
    ['only own remedies', [defaultPartitionProblem('d'), unboundedPartitionProblem('r')], ''],
    ['a table missing', ['table a is missing (migration A1)'], `${migrations}, or ${schemaSql}.`],
    ['the layout not partitioned', [LAYOUT_NOT_PARTITIONED], `${migrations}. ${partitionedOnce}`],
    ['the functions unpinned', [unpinned], `${migrations}. ${partitionedOnce}`],
    [
      'a column missing and the layout not partitioned',
      ['column x.y is missing (migration A1)', LAYOUT_NOT_PARTITIONED],
      `${migrations}, or ${schemaSql}. ${partitionedOnce}`,
    ],
  ])('%s', (_name, problems, expected) => {
    expect(schemaRemedy(problems)).toBe(expected);
  });
});
