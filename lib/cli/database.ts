import { type Client } from 'pg';
import {
  type CatalogEntry,
  CHECKED_FUNCTIONS,
  CHECKED_TABLES,
  SCHEMA_CATALOG_QUERY,
} from '../schema/schema-check.js';
import {
  PATH_POSITION,
  SEARCH_PATH_SCHEMAS,
  UNUSABLE_IN_PATH,
} from '../schema/search-path-schemas.js';
import { type DoctorFacts, type PartitionBounds, type UnusableTable } from './doctor-checks.js';
import { tenantFilter } from './tenant-filter.js';
import { dateOfEpochMs, epochMsOf } from '../connection/epoch-ms.js';

/**
 * Everything the command reads from and writes to the database, on one session of its own
 * (never the app's pool). The decisions are made elsewhere, from what these return. Times are
 * read as milliseconds since 1970 (`epochMsOf`), never as a timestamp's text, which follows the
 * database's `DateStyle` (adversary 107).
 */

/** The migrations table, or (when it does not resolve) the unusable schema that holds it. */
const HEAD = `WITH ${SEARCH_PATH_SCHEMAS}
SELECT current_database() AS database, current_user::text AS role,
  to_regclass($1)::text AS migrations,
  (SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE to_regclass($1) IS NULL AND c.relname = $2 AND c.relkind IN ('r', 'p')
      AND ${UNUSABLE_IN_PATH}
    ORDER BY ${PATH_POSITION} LIMIT 1) AS "migrationsSchema",
  ${epochMsOf('clock_timestamp()')} AS "nowMs"`;

const SETTINGS = `SELECT name, setting FROM pg_settings WHERE name = ANY($1)`;

const STUCK = `SELECT count(*)::int AS stuck,
  (extract(epoch FROM clock_timestamp() - min(locked_until)) * 1000)::float8
    AS oldest_ms
FROM idempotency_keys
WHERE state = 'started' AND locked_until < clock_timestamp() - $1 * interval '1 millisecond'`;

/**
 * Every partition, those left pending detach too (`checkPendingDetaches`), with its name and
 * the keys table's, each with its schema and quoted as SQL takes them (`quote_ident`, which
 * also quotes keywords): the doctor's statements are pasted into any session. `mayNotGive`: the
 * roles that may make partitions (they log in, have the keys table's owner's privileges, are no
 * superusers) but may not give this one to that owner, not being members of its owner (see
 * `partitionOwnerRemedy`).
 */
const PARTITION_FACTS = `SELECT ${epochMsOf('p.from_at')} AS "fromMs", ${epochMsOf('p.to_at')} AS "toMs",
  quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS name,
  p.detach_pending AS "detachPending",
  pg_get_userbyid(c.relowner)::text AS owner,
  pg_get_userbyid(k.relowner)::text AS "keysOwner",
  quote_ident(kn.nspname) || '.' || quote_ident(k.relname) AS "keysTable",
  pg_has_role(k.relowner, c.relowner, 'USAGE') OR pg_has_role(k.relowner, n.nspowner, 'USAGE')
    AS "keysOwnerMayDrop",
  n.nspname::text AS schema,
  has_schema_privilege(k.relowner, c.relnamespace, 'CREATE') AS "keysOwnerMayCreate",
  ARRAY(SELECT r.rolname::text FROM pg_roles r
    WHERE r.rolcanlogin AND NOT r.rolsuper AND pg_has_role(r.oid, k.relowner, 'USAGE')
      AND NOT pg_has_role(r.oid, c.relowner, 'USAGE')
    ORDER BY r.rolname) AS "mayNotGive"
FROM idempotency_key_partitions() p
JOIN pg_class c ON c.oid = p.partition
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_class k ON k.oid = to_regclass('idempotency_keys')
JOIN pg_namespace kn ON kn.oid = k.relnamespace
ORDER BY p.from_at`;

export async function readDoctorFacts(
  client: Client,
  migrationsTable: string,
  stuckAfterMs: number,
): Promise<DoctorFacts> {
  // The start-up check's own catalog query (schema-check.ts): the doctor and the check read
  // one catalog the same way, columns with their defaults, unique keys and grants.
  const { rows: catalog } = await client.query<CatalogEntry>(SCHEMA_CATALOG_QUERY, [
    CHECKED_TABLES,
    CHECKED_FUNCTIONS,
  ]);
  const tables = catalog.filter((entry) => entry.kind === 'table');
  const columns = tables.flatMap(({ name, columns }) =>
    columns.map(({ name: column, type }) => ({ table: name, column, type })),
  );
  const partitioned = tables.some((t) => t.name === 'idempotency_keys' && t.relkind === 'p');
  const unusable = new Map<string, UnusableTable>();
  for (const { name, unusableSchema } of tables) {
    if (unusableSchema) unusable.set(name, { table: name, schema: unusableSchema });
  }
  // Out of reach, the keys table cannot be read: the partitions and stuck keys are not looked at.
  const keysReached =
    columns.some((c) => c.table === 'idempotency_keys') && !unusable.has('idempotency_keys');

  const { rows: settingRows } = await client.query<{ name: string; setting: string }>(SETTINGS, [
    [
      'synchronous_commit',
      'statement_timeout',
      'lock_timeout',
      'max_connections',
      'superuser_reserved_connections',
      'reserved_connections',
    ],
  ]);
  const setting = (name: string) => settingRows.find((r) => r.name === name)?.setting;

  const { rows: head } = await client.query<{
    database: string;
    role: string;
    migrations: string | null;
    migrationsSchema: string | null;
    nowMs: string;
  }>(HEAD, [quoteIdent(migrationsTable), migrationsTable]);
  let migrationsRun: string[] | null = null;
  if (head[0].migrations !== null) {
    const { rows } = await client.query<{ name: string }>(
      `SELECT name FROM ${quoteIdent(migrationsTable)}`,
    );
    migrationsRun = rows.map((r) => r.name);
  }

  let partitions: PartitionBounds[] = [];
  let keysOwner: string | undefined;
  let keysTable: string | undefined;
  if (partitioned && keysReached) {
    const { rows } = await client.query<{
      fromMs: string | null;
      toMs: string | null;
      name: string;
      detachPending: boolean;
      owner: string;
      keysOwner: string;
      keysTable: string;
      keysOwnerMayDrop: boolean;
      schema: string;
      keysOwnerMayCreate: boolean;
      mayNotGive: string[];
    }>(PARTITION_FACTS);
    partitions = rows.map((row) => ({
      fromAt: dateOfEpochMs(row.fromMs),
      toAt: dateOfEpochMs(row.toMs),
      name: row.name,
      detachPending: row.detachPending,
      owner: row.owner,
      keysOwnerMayDrop: row.keysOwnerMayDrop,
      schema: row.schema,
      keysOwnerMayCreate: row.keysOwnerMayCreate,
      mayNotGive: row.mayNotGive,
    }));
    keysOwner = rows[0]?.keysOwner;
    keysTable = rows[0]?.keysTable;
  }

  let stuckKeys = 0;
  let oldestStuckMs: number | null = null;
  if (keysReached) {
    const { rows } = await client.query<{ stuck: number; oldest_ms: number | null }>(STUCK, [
      stuckAfterMs,
    ]);
    stuckKeys = rows[0].stuck;
    oldestStuckMs = rows[0].oldest_ms;
  }

  return {
    database: head[0].database,
    role: head[0].role,
    columns,
    catalog,
    unusable: [...unusable.values()],
    partitioned,
    migrationsRun,
    migrationsSchema: head[0].migrationsSchema,
    synchronousCommit: setting('synchronous_commit') ?? 'on',
    statementTimeoutMs: Number(setting('statement_timeout') ?? 0),
    lockTimeoutMs: Number(setting('lock_timeout') ?? 0),
    maxConnections: Number(setting('max_connections') ?? 100),
    reservedConnections:
      Number(setting('superuser_reserved_connections') ?? 0) +
      Number(setting('reserved_connections') ?? 0),
    partitions,
    keysOwner,
    keysTable,
    now: clockOf(head[0].nowMs),
    stuckKeys,
    oldestStuckMs,
  };
}

/** A key as `keys list` and `keys show` print it; times by the database's clock. */
export interface KeyRow {
  tenantId: string;
  key: string;
  state: string;
  recoveryPoint: string;
  phases: string[];
  lockVersion: string;
  claimId: string;
  createdAt: Date;
  finishedAt: Date | null;
  lockedUntil: Date | null;
  responseCode: number | null;
  responseBytes: number | null;
  now: Date;
}

const KEY_COLUMNS = `tenant_id AS "tenantId", key, state, recovery_point AS "recoveryPoint",
  ARRAY(SELECT jsonb_object_keys(phase_results)) AS phases, lock_version::text AS "lockVersion",
  claim_id::text AS "claimId", ${epochMsOf('created_at')} AS "createdAt",
  ${epochMsOf('finished_at')} AS "finishedAt", ${epochMsOf('locked_until')} AS "lockedUntil",
  response_code AS "responseCode", octet_length(response_body) AS "responseBytes",
  ${epochMsOf('clock_timestamp()')} AS now`;

/** KEY_COLUMNS as they come: the times as `epochMsOf` gives them. */
type KeyColumns = Omit<KeyRow, 'createdAt' | 'finishedAt' | 'lockedUntil' | 'now'> & {
  createdAt: string;
  finishedAt: string | null;
  lockedUntil: string | null;
  now: string;
};

function keyRowOf(row: KeyColumns): KeyRow {
  return {
    ...row,
    createdAt: clockOf(row.createdAt),
    finishedAt: dateOfEpochMs(row.finishedAt),
    lockedUntil: dateOfEpochMs(row.lockedUntil),
    now: clockOf(row.now),
  };
}

/** A time that is never NULL nor infinite (a clock, a creation time). */
function clockOf(ms: string): Date {
  return dateOfEpochMs(ms) ?? new Date(NaN);
}

/**
 * Unfinished keys, the stuck (lease expired longest ago) first, those given back last; of the
 * tenant `tenant` where given (a queue's jobs, `bullmq:payouts`), or of the tenants that begin
 * with it where it ends at `:` (every queue, `bullmq:`; the tasks, `schedule:`): see
 * `tenantFilter`.
 */
export async function listUnfinishedKeys(
  client: Client,
  limit: number,
  tenant?: string,
): Promise<KeyRow[]> {
  const filter = tenant === undefined ? undefined : tenantFilter(tenant);
  const { rows } = await client.query<KeyColumns>(
    `SELECT ${KEY_COLUMNS} FROM idempotency_keys
     WHERE state = 'started'
       AND ($2::text IS NULL OR tenant_id = $2 OR ($3::boolean AND starts_with(tenant_id, $2)))
     ORDER BY locked_until NULLS LAST, created_at, tenant_id, key LIMIT $1`,
    [limit, filter?.tenant ?? null, filter?.prefix ?? false],
  );
  return rows.map(keyRowOf);
}

export async function readKey(
  client: Client,
  tenant: string,
  key: string,
): Promise<KeyRow | undefined> {
  const { rows } = await client.query<KeyColumns>(
    `SELECT ${KEY_COLUMNS} FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
    [tenant, key],
  );
  return rows[0] && keyRowOf(rows[0]);
}

/** The tenants a key is kept under (a few): what `keys show` names when the tenant given has none. */
export async function tenantsOfKey(client: Client, key: string, limit: number): Promise<string[]> {
  const { rows } = await client.query<{ tenantId: string }>(
    `SELECT tenant_id AS "tenantId" FROM idempotency_keys WHERE key = $1
     ORDER BY tenant_id LIMIT $2`,
    [key, limit],
  );
  return rows.map(({ tenantId }) => tenantId);
}

/** The stored response as the claim store keeps it: what `keys show` may print of it. */
export interface StoredBody {
  body: Buffer | null;
  headers: Record<string, string> | null;
}

/** The stored response's bytes and headers, read only when the operator asks for them. */
export async function readResponseBody(
  client: Client,
  tenant: string,
  key: string,
): Promise<StoredBody> {
  const { rows } = await client.query<StoredBody>(
    `SELECT response_body AS body, response_headers AS headers FROM idempotency_keys
     WHERE tenant_id = $1 AND key = $2`,
    [tenant, key],
  );
  return rows[0] ?? { body: null, headers: null };
}

/**
 * Ends the lease of an unfinished key, fenced by the (lock_version, claim_id) read before: as
 * the library's own release does (`locked_until` NULL: the retry is counted `resumed`, not a
 * takeover of a lost worker), the row, its claim id and its phases stay, and the next
 * request with the key takes it over and resumes. A key that moved since it was read (taken
 * over, finished, released and claimed anew) is not touched. Returns whether it was released.
 */
export async function releaseKey(
  client: Client,
  tenant: string,
  key: string,
  lockVersion: string,
  claimId: string,
): Promise<boolean> {
  const { rowCount } = await client.query(
    `UPDATE idempotency_keys SET locked_until = NULL
     WHERE tenant_id = $1 AND key = $2 AND lock_version = $3 AND claim_id = $4
       AND state = 'started'`,
    [tenant, key, lockVersion, claimId],
  );
  return rowCount === 1;
}

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}
