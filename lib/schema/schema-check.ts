import {
  LAYOUT_NOT_PARTITIONED,
  LAYOUT_PARTITIONED_UNEXPECTED,
} from '../claim/partitioned/layout-errors.js';
import { defaultPartitionRemedy } from './default-partition-remedy.js';
import { type AheadLayout, netAheadRemedy } from './net-ahead-remedy.js';
import { PATH_POSITION, SEARCH_PATH_SCHEMAS, UNUSABLE_IN_PATH } from './search-path-schemas.js';
import { sqlName } from './sql-name.js';
import {
  type PartitionEnd,
  type PartitionEndLayout,
  partitionEndLimitMs,
  partitionsEndingTooFar,
  startsAhead,
} from './partition-ends.js';
import { epochMsOf } from '../connection/epoch-ms.js';

/** What the configured stores use of the app's database, beyond what every app needs. */
export interface SchemaNeeds {
  /** `partitionedExpiry`: `idempotency_keys` partitioned, with its functions. */
  partitioned: boolean;
  /** `largeResponses` without a store of its own: bodies in `idempotency_response_bodies`. */
  bodies: boolean;
  /** With `partitioned`, the app's layout: how far ahead a partition may end. */
  layout?: PartitionEndLayout;
}

/**
 * A table or a function as the catalog has it, in the app's `search_path`: the one the
 * library's unqualified statements resolve to or, when there is none, one in a schema that the
 * role's `search_path` names but the role may not use (`unusableSchema`).
 */
export type CatalogEntry =
  | {
      kind: 'table';
      name: string;
      /** `r` a plain table, `p` a partitioned one. */
      relkind: string;
      columns: { name: string; type: string; hasDefault: boolean }[];
      /** The column sets of its primary key and unique indexes (valid ones, not partial). */
      uniques: string[][];
      /** Of SELECT, INSERT, UPDATE, DELETE, those the app's role (`role`) lacks on it. */
      missingPrivileges: string[];
      role: string;
      /** The schema that holds it, when the role lacks USAGE on it (null: the table resolves). */
      unusableSchema?: string | null;
      /**
       * A partitioned table's DEFAULT partition, by its name with its schema, quoted as SQL
       * takes them (null or absent: none).
       */
      defaultPartition?: string | null;
      /** The schema that holds it (absent in older callers' entries). */
      schema?: string | null;
      /** Its partitions that end at MAXVALUE or 'infinity' (an operator's), by name. */
      unboundedPartitions?: string[] | null;
      /** Its owner, and whether the role has that owner's privileges (owns it, or is a member). */
      owner?: string | null;
      mayOwn?: boolean | null;
      /**
       * Whether the role is a member of the owner's role at all (a NOINHERIT member is, without
       * its privileges), and the server's `server_version_num` (how such a member inherits).
       */
      memberOfOwner?: boolean | null;
      serverVersion?: number | null;
      /**
       * Where the role's sessions make new partitions (`current_schema()`: the first schema of
       * its search path that exists; `CREATE TABLE` of an unqualified name lands there, not
       * in the keys table's schema, adversary 110), and whether it may create tables there.
       */
      makesIn?: string | null;
      mayCreate?: boolean | null;
    }
  | {
      kind: 'function';
      name: string;
      role?: string;
      unusableSchema?: string | null;
      /** Its own settings (`SET` on the function), as `name=value` (null: none). */
      settings?: string[] | null;
    };

/**
 * The keys table's partitions with their bounds, read through `idempotency_key_partitions()`
 * (pinned settings: a bound's text means one time whatever the session's) once the catalog
 * shows it, with the server's clock and how far ahead an operator's partition may end
 * (`partitionEndLimitMs`; the library's own may reach further, `partitionsEndingTooFar`).
 */
export interface PartitionBoundFacts {
  partitions: readonly PartitionEnd[];
  nowMs: number;
  limitMs: number;
}

const MIGRATIONS = {
  keys: 'CreateIdempotencyKeys1764460800000',
  processed: 'CreateProcessedMessages1764460900000',
  finishedAt: 'AddFinishedAt1764461200000',
  textTenants: 'TextTenantIds1764461300000',
  failures: 'CreateMessageFailures1764461400000',
  bodies: 'CreateResponseBodies1764461500000',
  partition: 'PartitionIdempotencyKeys1764461600000',
  leasedAt: 'AddLeasedAt1764461700000',
  pinnedPartitions: 'PinPartitionFunctions1764461800000',
};

export interface ColumnNeed {
  name: string;
  /** As `format_type()` prints it. */
  type: string;
  /** The migration that gives the column this type (when not the table's own). */
  migration?: string;
  /** An insert of the library's leaves it out: NOT NULL, it needs its DEFAULT. */
  defaulted?: boolean;
}

export interface TableNeed {
  table: string;
  migration: string;
  columns: ColumnNeed[];
  /** The columns an `ON CONFLICT` of the library's names: a primary key or unique index on them. */
  conflictKey?: string[];
}

const TIMESTAMPTZ = 'timestamp with time zone';

const KEYS: TableNeed = {
  table: 'idempotency_keys',
  migration: MIGRATIONS.keys,
  columns: [
    { name: 'tenant_id', type: 'text', migration: MIGRATIONS.textTenants },
    { name: 'key', type: 'text' },
    { name: 'fingerprint', type: 'bytea' },
    { name: 'state', type: 'text', defaulted: true },
    { name: 'recovery_point', type: 'text', defaulted: true },
    { name: 'locked_until', type: TIMESTAMPTZ },
    { name: 'lock_version', type: 'bigint', defaulted: true },
    { name: 'response_code', type: 'integer' },
    { name: 'response_body', type: 'bytea' },
    { name: 'created_at', type: TIMESTAMPTZ, defaulted: true },
    { name: 'claim_id', type: 'uuid', defaulted: true },
    { name: 'response_headers', type: 'jsonb' },
    { name: 'phase_results', type: 'jsonb', defaulted: true },
    { name: 'finished_at', type: TIMESTAMPTZ, migration: MIGRATIONS.finishedAt },
    { name: 'leased_at', type: TIMESTAMPTZ, migration: MIGRATIONS.leasedAt },
  ],
  conflictKey: ['tenant_id', 'key'],
};

const PLACED_AT: ColumnNeed = {
  name: 'placed_at',
  type: TIMESTAMPTZ,
  migration: MIGRATIONS.partition,
  defaulted: true,
};

/** The consumers' tables: `@IdempotentMessage()` and `ProcessedMessages`, and the purge's. */
const CONSUMER_TABLES: TableNeed[] = [
  {
    table: 'processed_messages',
    migration: MIGRATIONS.processed,
    columns: [
      { name: 'consumer', type: 'text' },
      { name: 'message_id', type: 'text' },
      { name: 'processed_at', type: TIMESTAMPTZ, defaulted: true },
    ],
    conflictKey: ['consumer', 'message_id'],
  },
  {
    table: 'message_failures',
    migration: MIGRATIONS.failures,
    columns: [
      { name: 'consumer', type: 'text' },
      { name: 'message_id', type: 'text' },
      { name: 'attempts', type: 'integer', defaulted: true },
      { name: 'last_error', type: 'text' },
      { name: 'last_failed_at', type: TIMESTAMPTZ, defaulted: true },
    ],
    conflictKey: ['consumer', 'message_id'],
  },
];

const BODIES: TableNeed = {
  table: 'idempotency_response_bodies',
  migration: MIGRATIONS.bodies,
  columns: [
    { name: 'id', type: 'uuid', defaulted: true },
    { name: 'tenant_id', type: 'text' },
    { name: 'key', type: 'text' },
    { name: 'claim_id', type: 'uuid' },
    { name: 'body', type: 'bytea' },
    { name: 'created_at', type: TIMESTAMPTZ, defaulted: true },
    { name: 'expires_at', type: TIMESTAMPTZ },
  ],
};

const PARTITION_FUNCTIONS = [
  'idempotency_claim',
  'idempotency_keys_create_partitions',
  'idempotency_key_partitions',
];

/**
 * The functions that read or write partition bounds as a timestamp's text, and the settings
 * each must carry for that text to mean one time whatever the session's (adversary 108).
 */
const PINNED_FUNCTIONS = ['idempotency_keys_create_partitions', 'idempotency_key_partitions'];
const PINNED_SETTINGS: Record<string, string> = { datestyle: 'ISO, YMD', timezone: 'UTC' };

/**
 * Whether a function's own settings (`pg_proc.proconfig`, `name=value`) pin every one of
 * `PINNED_SETTINGS`: made by `PinPartitionFunctions` (or `PartitionIdempotencyKeys` since),
 * not by an earlier `PartitionIdempotencyKeys`, whose functions carry none.
 */
export function hasPinnedSettings(settings: readonly string[] | null | undefined): boolean {
  const have = new Map(
    (settings ?? []).map((setting) => {
      const at = setting.indexOf('=');
      return [setting.slice(0, at).toLowerCase(), setting.slice(at + 1)] as const;
    }),
  );
  return Object.entries(PINNED_SETTINGS).every(([name, value]) => have.get(name) === value);
}

const DEFAULT_PARTITION_PREFIX = 'idempotency_keys has a DEFAULT partition';

/**
 * An operator's DEFAULT partition of the partitioned keys table, refused: the expiry never
 * drops it (its keys would stay for ever), PostgreSQL detaches no partition CONCURRENTLY while
 * it exists, and an ATTACH of a range some row of it falls in fails.
 */
export function defaultPartitionProblem(partition: string, keysSchema?: string): string {
  return (
    `${DEFAULT_PARTITION_PREFIX} (${partition}), which the partitioned expiry cannot expire: ` +
    'the library makes the partitions ahead itself. Its keys are answered requests (dropped, ' +
    'their retries would run again): move them to range partitions of their own, which the ' +
    `expiry drops in time, and drop it, in one transaction: ${defaultPartitionRemedy(partition, keysSchema)}`
  );
}

const UNBOUNDED_PARTITION_PREFIX = 'idempotency_keys has a partition without an end';

/** What the catalog says of an operator's partition without an end (or with a far one). */
export interface PartitionEndFacts {
  /** Its end as the refusal says it (absent: MAXVALUE or 'infinity'). */
  end?: string;
  /**
   * Its whole range is still ahead (a net added from the end of the partitions made ahead):
   * it holds no key yet, and `TO (now())`, below its start, would be refused by PostgreSQL
   * ("empty range bound specified for partition") after the DETACH went through.
   */
  startsAhead?: boolean;
  /** With `startsAhead`: its start, as the refusal says it. */
  start?: string;
  /** With `startsAhead`: the app's layout, for the partitions ahead the remedy makes. */
  layout?: AheadLayout;
}

/**
 * An operator's partition up to MAXVALUE or `'infinity'`, refused like a DEFAULT one
 * (adversary 109): once the present reaches it, no partition is made ahead any more (it covers
 * all time to come), every key lands in it and the expiry never drops it; an `'infinity'` bound
 * also fails `idempotency_keys_create_partitions()` on every call (22008, an infinite
 * interval). Given an end, it is one of the others: its keys stay where they are (a retry
 * still finds them) and the expiry drops it past the retention. Named with its schema. One up
 * to a far date is the same net (`partitionEndLimitMs`, adversary 110). The remedy printed is
 * the one that runs for the case the catalog shows: a partition whose range is all ahead holds
 * no key, and no end `now()` fits it (adversary 110); but it holds keys once the present reaches
 * its start, minutes on, so its remedy decides when it runs: dropped if still empty, else given
 * an end (`netAheadRemedy`, adversary 113).
 */
export function unboundedPartitionProblem(
  partition: string,
  keysSchema?: string,
  facts: PartitionEndFacts = {},
): string {
  const keys = keysSchema ? `${sqlName(keysSchema)}.idempotency_keys` : 'idempotency_keys';
  const detach = `ALTER TABLE ${keys} DETACH PARTITION ${partition}`;
  const what =
    facts.end === undefined
      ? `${UNBOUNDED_PARTITION_PREFIX} (${partition}, up to MAXVALUE or 'infinity')`
      : `${UNBOUNDED_PARTITION_PREFIX} in reach (${partition}, up to ${facts.end}, further ` +
        'ahead than any partition the library makes)';
  const head =
    `${what}, which the partitioned expiry cannot expire: once the present reaches it no ` +
    'partition is made ahead and its keys stay for ever; the library makes the partitions ' +
    'ahead itself.';
  if (facts.startsAhead) {
    return (
      `${head} Its range is all ahead, so it holds no key yet, but keys land in it once the ` +
      `present reaches its start${facts.start ? ` (${facts.start})` : ''}: run, as one ` +
      'transaction, what drops it while it holds no key and else gives it an end past its last ' +
      'key (its keys kept, it expires with the others) and makes the partitions ahead from ' +
      `there: ${netAheadRemedy(partition, keysSchema, facts.layout)} (it waits for the keys ` +
      "table's lock a little at a time, letting claims through; if it fails on the lock, run " +
      'it again, and not while a backup runs)'
    );
  }
  return (
    `${head} Give it an end: ${detach}; ALTER TABLE ${keys} ` +
    `ATTACH PARTITION ${partition} FOR VALUES FROM (<its start>) TO (now()) (its keys kept, it ` +
    `expires with the others), or, if it holds no key, DROP TABLE ${partition} after the DETACH`
  );
}

/** The keys table's owner and schema as the catalog query reads them for the app's role. */
type MakerFacts = Pick<
  Extract<CatalogEntry, { kind: 'table' }>,
  'role' | 'owner' | 'mayOwn' | 'memberOfOwner' | 'serverVersion' | 'makesIn' | 'mayCreate'
>;

/**
 * Whether the app's role may make the partitions ahead, which the partitioned store makes from
 * the app's own sessions (`idempotency_keys_create_partitions()`: CREATE TABLE of an
 * unqualified name, made in the session's `current_schema()`, then ATTACH PARTITION, which
 * PostgreSQL allows only to the table's owner or a member of its role). Without, the app would start and answer every keyed request 500 once the
 * partitions the migration left run out (adversary 109); undefined when it may (or the catalog
 * did not say).
 */
export function partitionMakerProblem(facts: MakerFacts): string | undefined {
  const { role, owner, mayOwn, memberOfOwner, serverVersion, makesIn, mayCreate } = facts;
  if (mayOwn !== false && mayCreate !== false) return undefined;
  const lacks: string[] = [];
  const grants: string[] = [];
  if (mayOwn === false && memberOfOwner === true) {
    // A NOINHERIT member: granting the role again changes nothing (adversary 110). Since
    // PostgreSQL 16 inheritance is the grant's; before, the member role's attribute.
    lacks.push(
      `ATTACH PARTITION to idempotency_keys, which only its owner ${owner} may: ${role} is a ` +
        'member without its privileges (NOINHERIT)',
    );
    grants.push(
      (serverVersion ?? 0) >= 160000
        ? `GRANT ${sqlName(owner ?? 'owner')} TO ${sqlName(role)} WITH INHERIT TRUE`
        : `ALTER ROLE ${sqlName(role)} INHERIT`,
    );
  } else if (mayOwn === false) {
    lacks.push(`ATTACH PARTITION to idempotency_keys, which only its owner ${owner} may`);
    grants.push(`GRANT ${sqlName(owner ?? 'owner')} TO ${sqlName(role)}`);
  }
  if (mayCreate === false && makesIn) {
    lacks.push(`CREATE TABLE in schema ${makesIn}, the first of its search_path`);
    grants.push(`GRANT CREATE ON SCHEMA ${sqlName(makesIn)} TO ${sqlName(role)}`);
  } else if (mayCreate === false) {
    lacks.push('CREATE TABLE: no schema of its search_path exists');
    grants.push(`ALTER ROLE ${sqlName(role)} SET search_path = <the keys table's schema>`);
  }
  return (
    `${GRANT_PREFIX}${role} may not make the partitions ahead, which the partitioned expiry ` +
    `makes from the app's sessions (${lacks.join('; ')}): ${grants.join('; ')} ` +
    "(or log the app in as the table's owner)"
  );
}

/** Every table the library's migrations leave, with its columns: the check's and the doctor's. */
export const SCHEMA_TABLES: readonly TableNeed[] = [KEYS, ...CONSUMER_TABLES, BODIES];

/** Every table the check may ask about, and every function: the catalog query's parameters. */
export const CHECKED_TABLES = SCHEMA_TABLES.map((need) => need.table);
export const CHECKED_FUNCTIONS = PARTITION_FUNCTIONS;

/**
 * The one catalog query of the check: the tables (with their columns' types) and functions of
 * those names that the app's sessions see (its `search_path`, as the library's unqualified
 * statements resolve them). `$1` the tables' names, `$2` the functions'. For a name that does
 * not resolve, the one in the first schema of the role's `search_path` setting that the role
 * may not use, with that schema (`unusableSchema`): one row a name.
 */
export const SCHEMA_CATALOG_QUERY = `WITH ${SEARCH_PATH_SCHEMAS}
(SELECT DISTINCT ON (c.relname) 'table' AS kind, c.relname AS name, c.relkind::text AS relkind,
  coalesce((SELECT json_agg(json_build_object('name', a.attname,
      'type', format_type(a.atttypid, a.atttypmod), 'hasDefault', a.atthasdef) ORDER BY a.attnum)
    FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
    '[]'::json) AS columns,
  coalesce((SELECT json_agg((SELECT json_agg(a.attname ORDER BY a.attname)
      FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey::int2[])))
    FROM pg_index i WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid
      AND i.indpred IS NULL AND i.indexprs IS NULL),
    '[]'::json) AS uniques,
  ARRAY(SELECT p FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p
    WHERE NOT has_table_privilege(c.oid, p)) AS "missingPrivileges",
  current_user::text AS role,
  CASE WHEN pg_table_is_visible(c.oid) THEN NULL ELSE n.nspname::text END AS "unusableSchema",
  (SELECT quote_ident(dn.nspname) || '.' || quote_ident(d.relname)
    FROM pg_partitioned_table pt JOIN pg_class d ON d.oid = pt.partdefid
    JOIN pg_namespace dn ON dn.oid = d.relnamespace
    WHERE pt.partrelid = c.oid) AS "defaultPartition",
  ARRAY(SELECT quote_ident(pn.nspname) || '.' || quote_ident(p.relname)
    FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid
    JOIN pg_namespace pn ON pn.oid = p.relnamespace CROSS JOIN LATERAL (SELECT pg_get_expr(p.relpartbound, p.oid) AS bound) b
    WHERE i.inhparent = c.oid
      AND (b.bound LIKE '% TO (MAXVALUE)' OR b.bound LIKE '% TO (''infinity'')')
    ORDER BY 1) AS "unboundedPartitions",
  pg_get_userbyid(c.relowner)::text AS owner,
  pg_has_role(c.relowner, 'USAGE') AS "mayOwn",
  pg_has_role(c.relowner, 'MEMBER') AS "memberOfOwner",
  current_setting('server_version_num')::int AS "serverVersion",
  current_schema()::text AS "makesIn",
  coalesce(has_schema_privilege(current_schema(), 'CREATE'), false) AS "mayCreate",
  NULL::text[] AS settings, n.nspname::text AS schema
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = ANY($1::text[]) AND c.relkind IN ('r', 'p')
  AND (pg_table_is_visible(c.oid) OR ${UNUSABLE_IN_PATH})
ORDER BY c.relname, pg_table_is_visible(c.oid) DESC, ${PATH_POSITION})
UNION ALL
(SELECT DISTINCT ON (p.proname) 'function', p.proname, NULL, '[]'::json, '[]'::json,
  ARRAY[]::text[], current_user::text,
  CASE WHEN pg_function_is_visible(p.oid) THEN NULL ELSE n.nspname::text END, NULL,
  NULL::text[], NULL::text, NULL::boolean, NULL::boolean, NULL::int, NULL::text, NULL::boolean,
  p.proconfig, n.nspname::text
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.proname = ANY($2::text[]) AND (pg_function_is_visible(p.oid) OR ${UNUSABLE_IN_PATH})
ORDER BY p.proname, pg_function_is_visible(p.oid) DESC, ${PATH_POSITION})`;

/**
 * The keys table's partitions with their bounds in milliseconds since 1970, and the server's
 * clock (one row with NULLs when there is no partition). Run once the catalog shows
 * `idempotency_key_partitions()` with its pinned settings; the names as the catalog's.
 */
export const PARTITION_BOUNDS_QUERY = `SELECT ${epochMsOf('now()')} AS "nowMs",
  (SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p.partition) AS partition,
  ${epochMsOf('p.from_at')} AS "fromMs", ${epochMsOf('p.to_at')} AS "toMs"
FROM (SELECT 1) one
LEFT JOIN idempotency_key_partitions() p ON NOT p.detach_pending`;

/** Whether the catalog shows what `PARTITION_BOUNDS_QUERY` needs: a partitioned keys table and its pinned function. */
export function partitionBoundsReadable(
  needs: SchemaNeeds,
  catalog: readonly CatalogEntry[],
): boolean {
  if (!needs.partitioned || needs.layout === undefined) return false;
  const keys = catalog.find((entry) => entry.kind === 'table' && entry.name === KEYS.table);
  const list = catalog.find(
    (entry) => entry.kind === 'function' && entry.name === 'idempotency_key_partitions',
  );
  return (
    keys?.kind === 'table' &&
    keys.relkind === 'p' &&
    !keys.unusableSchema &&
    list?.kind === 'function' &&
    !list.unusableSchema &&
    hasPinnedSettings(list.settings)
  );
}

/** `PARTITION_BOUNDS_QUERY`'s rows (int8 as text) as `missingSchema`'s bounds. */
export function partitionBoundsOf(
  rows: readonly {
    nowMs: string | number;
    partition: string | null;
    fromMs: string | number | null;
    toMs: string | number | null;
  }[],
  layout: PartitionEndLayout,
): PartitionBoundFacts {
  const ms = (value: string | number | null) => (value === null ? null : Number(value));
  const partitions = rows
    .filter((row) => row.partition !== null)
    .map((row) => ({ partition: row.partition!, fromMs: ms(row.fromMs), toMs: ms(row.toMs) }));
  return {
    nowMs: Number(rows[0]?.nowMs),
    limitMs: partitionEndLimitMs(layout),
    partitions,
  };
}

/**
 * What the configured stores need and the catalog lacks, each naming the migration that makes
 * it; empty when the schema is complete. A table is checked for its columns and their types;
 * the keys table for its layout too (partitioned or not, as `partitionedExpiry` says). What
 * sits in a schema the role may not use is there, not missing: the GRANT USAGE that reaches it
 * comes first, one line a schema, and the table is checked as if reached.
 */
export function missingSchema(
  needs: SchemaNeeds,
  catalog: readonly CatalogEntry[],
  bounds?: PartitionBoundFacts,
): string[] {
  const tables = new Map<string, Extract<CatalogEntry, { kind: 'table' }>>();
  const functions = new Map<string, CatalogEntry>();
  /** By schema the role may not use: the role, and what of ours the schema holds. */
  const unusable = new Map<string, { role: string; holds: string[] }>();
  const reach = (entry: CatalogEntry, shown: string) => {
    if (!entry.unusableSchema) return;
    const schema = unusable.get(entry.unusableSchema);
    if (schema) schema.holds.push(shown);
    else unusable.set(entry.unusableSchema, { role: entry.role ?? 'current_user', holds: [shown] });
  };
  for (const entry of catalog) {
    if (entry.kind === 'table') tables.set(entry.name, entry);
    else functions.set(entry.name, entry);
  }
  const keys: TableNeed = needs.partitioned
    ? { ...KEYS, columns: [...KEYS.columns, PLACED_AT] }
    : KEYS;
  const wanted = [keys, ...CONSUMER_TABLES, ...(needs.bodies ? [BODIES] : [])];
  const problems: string[] = [];
  for (const need of wanted) {
    const found = tables.get(need.table);
    if (!found) {
      problems.push(`table ${need.table} is missing (migration ${need.migration})`);
      continue;
    }
    reach(found, need.table);
    const columns = new Map(found.columns.map((column) => [column.name, column]));
    for (const column of need.columns) {
      const have = columns.get(column.name);
      const migration = column.migration ?? need.migration;
      if (have === undefined) {
        problems.push(`column ${need.table}.${column.name} is missing (migration ${migration})`);
      } else if (have.type !== column.type) {
        problems.push(
          `column ${need.table}.${column.name} is ${have.type}, not ${column.type} (migration ${migration})`,
        );
      } else if (column.defaulted && !have.hasDefault) {
        // Without it every insert fails with 23502, a 500 on every claim.
        problems.push(
          `column ${need.table}.${column.name} has no DEFAULT, which the insert needs ` +
            `(migration ${migration})`,
        );
      }
    }
    // Read alone passes every check and fails every keyed request: said at start-up instead.
    const lacking = found.missingPrivileges ?? [];
    if (lacking.length > 0) problems.push(privilegeProblem(found.role, need.table, lacking));
    // A partitioned keys table has none (each partition has its own, see the migration).
    const partitionedKeys = need.table === KEYS.table && found.relkind === 'p';
    if (need.conflictKey && !partitionedKeys && !hasUnique(found.uniques, need.conflictKey)) {
      problems.push(
        `${need.table} has no primary key or unique index on (${need.conflictKey.join(', ')}), ` +
          `which the library's ON CONFLICT needs (migration ${need.migration})`,
      );
    }
  }
  const keysTable = tables.get(KEYS.table);
  if (keysTable) {
    const partitioned = keysTable.relkind === 'p';
    if (needs.partitioned && !partitioned) problems.push(LAYOUT_NOT_PARTITIONED);
    if (!needs.partitioned && partitioned) problems.push(LAYOUT_PARTITIONED_UNEXPECTED);
    if (needs.partitioned && partitioned) {
      for (const name of PARTITION_FUNCTIONS) {
        const found = functions.get(name);
        if (!found) {
          problems.push(`function ${name}() is missing (migration ${MIGRATIONS.partition})`);
          continue;
        }
        reach(found, `${name}()`);
        const settings = found.kind === 'function' ? found.settings : undefined;
        if (PINNED_FUNCTIONS.includes(name) && !hasPinnedSettings(settings)) {
          problems.push(
            `function ${name}() reads partition bounds in the session's DateStyle and TimeZone ` +
              `(migration ${MIGRATIONS.pinnedPartitions})`,
          );
        }
      }
      if (keysTable.defaultPartition) {
        problems.push(
          defaultPartitionProblem(keysTable.defaultPartition, keysTable.schema ?? undefined),
        );
      }
      const keysSchema = keysTable.schema ?? undefined;
      const byName = new Map(bounds?.partitions.map((p) => [p.partition, p]));
      // For a net all ahead: its start and the layout, which its remedy makes partitions with.
      const ahead = (name: string): PartitionEndFacts => {
        const read = byName.get(name);
        if (bounds === undefined || !startsAhead(read, bounds.nowMs)) return {};
        const layout = needs.layout;
        return {
          startsAhead: true,
          start: new Date(read!.fromMs!).toISOString(),
          ...(layout?.partitionsAhead !== undefined && {
            layout: { partitionMs: layout.partitionMs, partitionsAhead: layout.partitionsAhead },
          }),
        };
      };
      const unbounded = keysTable.unboundedPartitions ?? [];
      for (const partition of unbounded) {
        problems.push(unboundedPartitionProblem(partition, keysSchema, ahead(partition)));
      }
      // Judged by its end, not by its text: a far date is the same net (adversary 110).
      const far =
        bounds === undefined
          ? []
          : partitionsEndingTooFar(bounds.partitions, bounds.nowMs, bounds.limitMs);
      for (const { partition, toMs } of far) {
        if (unbounded.includes(partition)) continue;
        problems.push(
          unboundedPartitionProblem(partition, keysSchema, {
            end: new Date(toMs!).toISOString(),
            ...ahead(partition),
          }),
        );
      }
      const maker = partitionMakerProblem(keysTable);
      if (maker !== undefined) problems.push(maker);
    }
  }
  const usage = [...unusable].map(([schema, { role, holds }]) => usageProblem(role, schema, holds));
  return [...usage, ...problems];
}

const GRANT_PREFIX = 'the role ';

/** What a role lacks on a table, with the GRANT that gives it (the start-up check's, health's). */
export function privilegeProblem(role: string, table: string, lacking: readonly string[]): string {
  return (
    `${GRANT_PREFIX}${role} may not ${lacking.join(', ')} on ${table}: ` +
    `GRANT SELECT, INSERT, UPDATE, DELETE ON ${table} TO ${sqlName(role)}`
  );
}

/**
 * A schema of the role's `search_path` that holds the library's tables (or functions) and
 * that the role may not use, with the GRANT that reaches them: without it PostgreSQL leaves
 * the schema out of the path, and they look missing (the start-up check's, health's).
 */
export function usageProblem(role: string, schema: string, holds: readonly string[]): string {
  return (
    `${GRANT_PREFIX}${role} may not use schema ${schema}, which holds ${holds.join(', ')}: ` +
    `GRANT USAGE ON SCHEMA ${sqlName(schema)} TO ${sqlName(role)}`
  );
}

/** Whether one of the unique column sets is exactly `columns` (ON CONFLICT's inference). */
function hasUnique(uniques: readonly string[][], columns: readonly string[]): boolean {
  const wanted = [...columns].sort().join(',');
  return uniques.some((unique) => [...unique].sort().join(',') === wanted);
}

/** The start-up refusal's message: what is missing, and the ways to create it. */
export function schemaMessage(problems: readonly string[]): string {
  const head =
    "IdempotencyModule: the app's database lacks what the library needs:\n" +
    problems.map((problem) => `- ${problem}\n`).join('');
  return head + schemaRemedy(problems);
}

/**
 * The ways to make what the problems say is missing, for the refusal's last line: none when
 * each problem says what to do itself (a grant, an operator's partition); the migrations, or
 * migrations/schema.sql, for the tables and columns; for the partitioned layout, which
 * schema.sql does not hold (adversary 109), only the migrations, which an app without TypeORM
 * migrations runs once with a DataSource of their own.
 */
export function schemaRemedy(problems: readonly string[]): string {
  const ownRemedy = (problem: string) =>
    problem.startsWith(GRANT_PREFIX) ||
    problem.startsWith(DEFAULT_PARTITION_PREFIX) ||
    problem.startsWith(UNBOUNDED_PARTITION_PREFIX);
  const layout = (problem: string) =>
    problem.includes(MIGRATIONS.partition) || problem.includes(MIGRATIONS.pinnedPartitions);
  const rest = problems.filter((problem) => !ownRemedy(problem));
  if (rest.length === 0) return '';
  const migrations =
    "Run the library's migrations in the app's DataSource (migrations: " +
    '[...IDEMPOTENCY_MIGRATIONS, ...yours], then migrationsRun: true or `typeorm migration:run`; ' +
    `with partitionedExpiry, ${MIGRATIONS.partition} after them)`;
  const schemaSql = "apply the package's migrations/schema.sql with your own migration tool";
  const partitionedOnce =
    'The partitioned layout is not in schema.sql: without TypeORM migrations, run ' +
    `${MIGRATIONS.partition} and ${MIGRATIONS.pinnedPartitions} once with a DataSource of ` +
    "their own (new DataSource({ type: 'postgres', url, migrations: " +
    `[${MIGRATIONS.partition}, ${MIGRATIONS.pinnedPartitions}] }), then initialize() and ` +
    'runMigrations(); see docs/operations/partitioned-expiry.md).';
  if (rest.every(layout)) return `${migrations}. ${partitionedOnce}`;
  if (rest.some(layout)) return `${migrations}, or ${schemaSql}. ${partitionedOnce}`;
  return `${migrations}, or ${schemaSql}.`;
}
