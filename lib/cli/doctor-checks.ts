import { type CatalogEntry, missingSchema, usageProblem } from '../schema/schema-check.js';
import { pendingDetachRemedy } from '../claim/partitioned/pending-detach-remedy.js';
import { formatDuration } from './duration.js';
import { EXPECTED_SCHEMA } from './expected-schema.js';
import { partitionOwnerRemedy } from './partition-owner-remedy.js';

/**
 * The doctor's checks, each a pure function of what was read from the database and what the
 * operator said of the app (`DoctorSettings`). `fail` is a problem (exit code 1); `warn` is
 * worth a look but breaks nothing.
 */
export type FindingLevel = 'ok' | 'warn' | 'fail';

export interface Finding {
  level: FindingLevel;
  /** What was checked: `schema`, `migrations`, ... */
  topic: string;
  message: string;
}

/** A column of one of the library's tables, as the catalog has it. */
export interface CatalogColumn {
  table: string;
  column: string;
  type: string;
}

/**
 * One of the library's tables that the session's names do not reach: it sits in a schema of
 * the role's `search_path` that the role may not use (PostgreSQL leaves it out of the path).
 */
export interface UnusableTable {
  table: string;
  schema: string;
}

/** A partition of `idempotency_keys` (null bounds: MINVALUE / MAXVALUE). */
export interface PartitionBounds {
  fromAt: Date | null;
  toAt: Date | null;
  /** The role that owns it (absent: not read). */
  owner?: string;
  /**
   * Whether the keys table's owner may drop it (it has its owner's privileges, or its schema's
   * owner's), and so every role that may attach partitions; absent: not read.
   */
  keysOwnerMayDrop?: boolean;
  /** Its schema, and whether the keys table's owner has CREATE there (may be given it). */
  schema?: string;
  keysOwnerMayCreate?: boolean;
  /** Its name with its schema, quoted as SQL takes them (absent: not read). */
  name?: string;
  /**
   * Whether a detach of it was left pending (an interrupted `DETACH ... CONCURRENTLY`): out of
   * every new query's sight, so it covers no time, but still there to be finished and dropped.
   */
  detachPending?: boolean;
  /**
   * The roles that may make partitions (they log in, have the keys table's owner's privileges,
   * are no superusers) but may not give this one to the keys table's owner (no members of its
   * owner); absent: not read.
   */
  mayNotGive?: string[];
}

/** What `readDoctorFacts()` reads, all in one session, by the database's clock. */
export interface DoctorFacts {
  database: string;
  /** The session's role: the app's, when given the app's URL. */
  role: string;
  /** The columns of the library's tables, those out of reach (`unusable`) included. */
  columns: CatalogColumn[];
  /** The start-up check's reading of the catalog: defaults, unique keys and grants too. */
  catalog: CatalogEntry[];
  /** The tables of `columns` that sit in a schema the role may not use. */
  unusable: UnusableTable[];
  /** Whether `idempotency_keys` is the partitioned layout. */
  partitioned: boolean;
  /** Names recorded in the migrations table; null when there is no such table. */
  migrationsRun: string[] | null;
  /** When it is not reached: the schema of the `search_path` that holds it, out of reach. */
  migrationsSchema: string | null;
  synchronousCommit: string;
  statementTimeoutMs: number;
  lockTimeoutMs: number;
  maxConnections: number;
  reservedConnections: number;
  /** The partitions, when `partitioned`. */
  partitions: PartitionBounds[];
  /** The keys table's owner (absent: not read). */
  keysOwner?: string;
  /** The keys table's name with its schema, quoted as SQL takes them (absent: not read). */
  keysTable?: string;
  now: Date;
  /** Keys started whose lease expired more than `stuckAfterMs` ago. */
  stuckKeys: number;
  /** How long ago the oldest stuck key's lease expired. */
  oldestStuckMs: number | null;
}

/** What the app is configured with, as the operator tells the command. */
export interface DoctorSettings {
  /** The app's `leaseMs`. */
  leaseMs: number;
  /** The app's pool size per instance (a pg.Pool's `max`, TypeORM's `extra.max`; pg's default is 10). */
  poolSize: number;
  instances: number;
  /** Requests one instance serves at once, when known. */
  concurrency?: number;
  /** A key is stuck once its lease expired this long ago with no retry taking it over. */
  stuckAfterMs: number;
  migrationsTable: string;
}

/**
 * The schema's finding. A table out of reach (`unusable`) is there, not missing: the GRANT
 * USAGE that reaches it comes first, one a schema, then what else its columns say.
 */
export function checkSchema(
  columns: readonly CatalogColumn[],
  partitioned: boolean,
  unusable: readonly UnusableTable[] = [],
  role = 'current_user',
  catalog?: readonly CatalogEntry[],
): Finding {
  const found = checkColumns(columns, partitioned);
  if (unusable.length === 0)
    return found.level === 'ok' && catalog ? beyondColumns(found, catalog, partitioned) : found;
  const bySchema = new Map<string, string[]>();
  // In the library's order of its tables, whatever order the catalog read them in.
  for (const table of Object.keys(EXPECTED_SCHEMA)) {
    const schema = unusable.find((u) => u.table === table)?.schema;
    if (schema !== undefined) bySchema.set(schema, [...(bySchema.get(schema) ?? []), table]);
  }
  const usage = [...bySchema].map(([schema, tables]) => usageProblem(role, schema, tables));
  return {
    level: 'fail',
    topic: found.topic,
    message: [...usage, ...(found.level === 'ok' ? [] : [found.message])].join('; '),
  };
}

/**
 * With every table and column as expected: what else the start-up check would refuse (a
 * DEFAULT an insert needs, the unique key an ON CONFLICT needs, a grant the role lacks, a
 * partition function), each with its migration or GRANT. Before, the doctor passed these and
 * the app refused to start.
 */
function beyondColumns(
  found: Finding,
  catalog: readonly CatalogEntry[],
  partitioned: boolean,
): Finding {
  const problems = missingSchema({ partitioned, bodies: true }, catalog);
  if (problems.length === 0) return found;
  // Each names its migration, or the GRANT.
  return { level: 'fail', topic: found.topic, message: problems.join('; ') };
}

function checkColumns(columns: readonly CatalogColumn[], partitioned: boolean): Finding {
  const topic = 'schema';
  const found = new Map<string, Map<string, string>>();
  for (const { table, column, type } of columns) {
    if (!found.has(table)) found.set(table, new Map());
    found.get(table)!.set(column, type);
  }
  const tables = Object.keys(EXPECTED_SCHEMA);
  const missingTables = tables.filter((table) => !found.has(table));
  if (missingTables.length > 0) {
    return {
      level: 'fail',
      topic,
      message:
        `missing ${missingTables.length === 1 ? 'table' : 'tables'} ${missingTables.join(', ')}: ` +
        "run the library's migrations (on a pg.Pool: migrations/schema.sql; on TypeORM: " +
        "IDEMPOTENCY_MIGRATIONS in the DataSource's migrations)",
    };
  }
  const misfits: string[] = [];
  for (const table of tables) {
    for (const [column, type] of Object.entries(EXPECTED_SCHEMA[table])) {
      const actual = found.get(table)!.get(column);
      if (actual === undefined) misfits.push(`${table}.${column} (${type}) is missing`);
      else if (actual !== type) misfits.push(`${table}.${column} is ${actual}, not ${type}`);
    }
  }
  if (misfits.length > 0) {
    return {
      level: 'fail',
      topic,
      message: `${misfits.join('; ')}: run the library's pending migrations`,
    };
  }
  const layout = partitioned ? 'partitioned' : 'plain';
  return {
    level: 'ok',
    topic,
    message: `${tables.length} tables as the library expects (idempotency_keys ${layout})`,
  };
}

/** `outOfReach`: the migrations table sits in a schema of the search_path the role may not use. */
export function checkMigrations(
  run: readonly string[] | null,
  expected: readonly string[],
  table: string,
  schemaComplete: boolean,
  outOfReach?: { role: string; schema: string },
): Finding {
  const topic = 'migrations';
  if (run === null && outOfReach) {
    return {
      level: 'fail',
      topic,
      message: usageProblem(outOfReach.role, outOfReach.schema, [table]),
    };
  }
  if (run === null) {
    // A complete schema without the table is what the set-up for Prisma, Drizzle, Kysely and
    // pg makes (schema.sql): nothing to look at, and the schema check still finds any column
    // a later version adds.
    return schemaComplete
      ? {
          level: 'ok',
          topic,
          message:
            `no table "${table}", and none needed: the schema is complete (made with ` +
            'schema.sql or by hand); a TypeORM app whose migrations table has another name: ' +
            '--migrations-table',
        }
      : {
          level: 'fail',
          topic,
          message:
            `no table "${table}": none of the library's ${expected.length} migrations has run ` +
            '(on a pg.Pool: apply migrations/schema.sql; on TypeORM: add IDEMPOTENCY_MIGRATIONS ' +
            "to the DataSource's migrations, with migrationsRun: true or `typeorm " +
            'migration:run`); another table name: --migrations-table',
        };
  }
  const pending = expected.filter((name) => !run.includes(name));
  if (pending.length > 0) {
    return {
      level: 'fail',
      topic,
      message:
        `${pending.length} of the library's ${expected.length} pending: ${pending.join(', ')} ` +
        "(run them: IDEMPOTENCY_MIGRATIONS in the DataSource's migrations)",
    };
  }
  return { level: 'ok', topic, message: `the library's ${expected.length} have run` };
}

export function checkSynchronousCommit(value: string, database: string): Finding {
  const topic = 'synchronous_commit';
  if (value === 'off') {
    return {
      level: 'fail',
      topic,
      message:
        'off: a claim or a stored response the app was told had committed can vanish in a ' +
        'crash, and its request then runs again; turn it back on: ' +
        `ALTER DATABASE ${database} RESET synchronous_commit`,
    };
  }
  return { level: 'ok', topic, message: value };
}

/** `statement_timeout` or `lock_timeout` against the lease. */
export function checkTimeout(name: string, timeoutMs: number, leaseMs: number): Finding {
  if (timeoutMs === 0) {
    return { level: 'ok', topic: name, message: 'none (the library bounds its own calls)' };
  }
  if (timeoutMs > leaseMs) {
    return {
      level: 'fail',
      topic: name,
      message:
        `${formatDuration(timeoutMs)}, longer than the lease (${formatDuration(leaseMs)}): a ` +
        'statement blocked that long outlives the lease unless a heartbeat renews it, another ' +
        "request takes the key over and the blocked worker's work is thrown away; set it " +
        "below the lease, or give --lease-ms the app's leaseMs",
    };
  }
  return {
    level: 'ok',
    topic: name,
    message: `${formatDuration(timeoutMs)}, within the lease (${formatDuration(leaseMs)})`,
  };
}

export function checkPool(
  settings: Pick<DoctorSettings, 'poolSize' | 'instances' | 'concurrency'>,
  maxConnections: number,
  reservedConnections: number,
): Finding {
  const topic = 'pool';
  const { poolSize, instances, concurrency } = settings;
  const available = maxConnections - reservedConnections;
  const wanted = poolSize * instances;
  const pools = `${instances} × ${poolSize} connections`;
  if (wanted > available) {
    return {
      level: 'fail',
      topic,
      message:
        `${pools} = ${wanted}, more than the server's max_connections (${maxConnections}, ` +
        `${reservedConnections} reserved): under load some instances cannot connect and ` +
        'answer 503; lower the pools or raise max_connections',
    };
  }
  if (concurrency !== undefined && concurrency > poolSize) {
    return {
      level: 'fail',
      topic,
      message:
        `${concurrency} requests at once on a pool of ${poolSize}: each holds a connection ` +
        `for its claim and its transaction, so ${concurrency - poolSize} wait for one and answer ` +
        "503 after the library's databaseTimeoutMs; raise the pool (max of the app's pg.Pool, " +
        'or extra.max of a TypeORM DataSource) or lower the concurrency',
    };
  }
  const load = concurrency === undefined ? '' : `, ${concurrency} requests at once`;
  return {
    level: 'ok',
    topic,
    message: `${pools} within max_connections ${maxConnections} (${reservedConnections} reserved)${load}`,
  };
}

export function checkPartitions(
  partitioned: boolean,
  all: readonly PartitionBounds[],
  now: Date,
): Finding {
  const topic = 'partitions';
  if (!partitioned) return { level: 'ok', topic, message: 'plain table (no partitioned expiry)' };
  // A partition pending detach is out of every new query's sight: it covers no time.
  const partitions = all.filter((p) => p.detachPending !== true);
  const at = now.getTime();
  const live = partitions.find(
    (p) =>
      (p.fromAt === null || p.fromAt.getTime() <= at) && (p.toAt === null || p.toAt.getTime() > at),
  );
  if (live === undefined) {
    return {
      level: 'fail',
      topic,
      message:
        'none covers the present: every claim waits while one is made; start the app with ' +
        'partitionedExpiry, whose purge makes them ahead',
    };
  }
  // One up to MAXVALUE or 'infinity' (read alike): the start-up check refuses it (adversary
  // 109), as once live it stops the partitions ahead and is never dropped.
  if (partitions.some((p) => p.toAt === null)) {
    return {
      level: 'fail',
      topic,
      message:
        `${live.toAt === null ? 'the live one' : 'one'} never ends (MAXVALUE or 'infinity'): ` +
        'no partition is made ahead once it is live, and the expiry never drops it; the app ' +
        'refuses to start: detach it (the schema finding names it)',
    };
  }
  const ahead = partitions
    .filter((p) => p.fromAt !== null && p.fromAt.getTime() > at)
    .sort((a, b) => a.fromAt!.getTime() - b.fromAt!.getTime());
  if (ahead.length === 0) {
    return {
      level: 'fail',
      topic,
      message:
        'none ahead of the live one: when it ends, claims wait while the next is made; ' +
        "the app's purge makes them ahead (partitionedExpiry): check that it runs",
    };
  }
  // The live partition may be a short one (the first after the migration): one ahead is whole.
  const [next] = ahead;
  const width =
    next.toAt === null
      ? ''
      : `, ${formatDuration(next.toAt.getTime() - next.fromAt!.getTime())} wide`;
  return { level: 'ok', topic, message: `${ahead.length} ahead of the live one${width}` };
}

/**
 * The partitions' owners. Each partition is owned by the role whose session made it, and only
 * a member of its owner (or of its schema's owner) may drop it. The store gives each partition
 * it makes to the keys table's owner (partition-hand-over.ts), whose members are every role
 * that may attach partitions, so any of them may drop it. A partition the keys table's owner
 * may not drop is one that the purge of every other role (a second app role, a job, the
 * migrations' role's cron: adversary 110, 111) empties row by row instead and leaves attached
 * for ever. Such partitions are named with what to do (`partitionOwnerRemedy`): the owner's
 * CREATE on their schema, which PostgreSQL asks of a table's new owner, then a run of the app
 * where every role that may make partitions may give them, else each partition's ALTER ...
 * OWNER TO, as a superuser or its maker: a role the app no longer logs in as (credentials
 * rotated) never gives them (adversary 115). A detach left pending is `checkPendingDetaches`'s.
 * Undefined when there is none, or the owners were not read: no line is printed.
 */
export function checkPartitionOwners(
  keysOwner: string | undefined,
  partitions: readonly PartitionBounds[],
): Finding | undefined {
  if (keysOwner === undefined) return undefined;
  const stranded = partitions.filter(
    (p) =>
      p.owner !== undefined &&
      p.owner !== keysOwner &&
      p.keysOwnerMayDrop !== true &&
      p.detachPending !== true,
  );
  if (stranded.length === 0) return undefined;
  const owners = [...new Set(stranded.map((p) => p.owner))].sort();
  // The statements are pasted as printed: names quoted where SQL would not read them bare
  // (a role "idem-owner" or "Migrator"), as the store's own warning quotes them.
  const remedy = partitionOwnerRemedy(
    keysOwner,
    stranded.map((p) => ({
      name: p.name,
      owner: p.owner!,
      schema: p.schema ?? '?',
      keysOwnerMayCreate: p.keysOwnerMayCreate !== false,
      mayNotGive: p.mayNotGive ?? [],
    })),
  );
  const count = stranded.length === 1 ? '1 partition' : `${stranded.length} partitions`;
  return {
    level: 'warn',
    topic: 'partitions',
    message:
      `${count} owned by ${owners.join(', ')}, which the keys table's owner ${keysOwner} may ` +
      'not drop: the purge of any other role deletes their expired keys row by row instead ' +
      '(dead tuples for vacuum) and leaves them attached for ever. To have them dropped: ' +
      remedy,
  };
}

/**
 * The detaches left pending (a purge stopped during its `DETACH ... CONCURRENTLY`) of
 * partitions the keys table's owner may not drop: another role's, its maker's where it could
 * not be given. The purge of every other role leaves such a partition alone (finished, it could
 * not be dropped), and while it is pending PostgreSQL detaches no other partition
 * `CONCURRENTLY`, so every purge detaches expired partitions under the table's lock instead.
 * Only its owner's purge (if its sessions still run) or an operator ends that; the store says
 * it once per process, in a log read by no one weeks later (adversary 115), so the doctor names
 * each one with what to run (`pendingDetachRemedy`). One the keys table's owner may drop is
 * finished and dropped by the next purge: nothing to say.
 */
export function checkPendingDetaches(
  keysOwner: string | undefined,
  keysTable: string | undefined,
  partitions: readonly PartitionBounds[],
): Finding[] {
  if (keysOwner === undefined) return [];
  return partitions
    .filter((p) => p.detachPending === true && p.owner !== keysOwner && p.keysOwnerMayDrop !== true)
    .map((p) => {
      const name = p.name ?? 'a partition';
      const owner = p.owner ?? 'another role';
      return {
        level: 'warn',
        topic: 'partitions',
        message:
          `${name} has a detach left pending (an interrupted purge) and is owned by ${owner}, ` +
          `which the keys table's owner ${keysOwner} may not drop: the purge of any other role ` +
          'leaves it there, and while it is pending PostgreSQL detaches no other partition ' +
          "CONCURRENTLY, so every purge detaches expired ones under the table's lock instead " +
          `(claims wait for it). The purge of a session of ${owner} finishes and drops it; if ` +
          `none runs any more, as ${owner} or a superuser: ` +
          pendingDetachRemedy(keysTable ?? 'idempotency_keys', name),
      } satisfies Finding;
    });
}

export function checkStuckKeys(
  stuck: number,
  oldestStuckMs: number | null,
  stuckAfterMs: number,
): Finding {
  const topic = 'keys';
  const after = formatDuration(stuckAfterMs);
  if (stuck === 0) {
    return { level: 'ok', topic, message: `none stuck (lease expired over ${after} ago)` };
  }
  const oldest = oldestStuckMs === null ? '' : `, the oldest ${formatDuration(oldestStuckMs)} ago`;
  return {
    level: 'warn',
    topic,
    message:
      `${stuck} stuck: started, lease expired over ${after} ago${oldest}, no retry since ` +
      '(`keys list` shows them; a retry with the key takes it over and resumes)',
  };
}

/** Every check, in the order they print. */
export function diagnose(
  facts: DoctorFacts,
  settings: DoctorSettings,
  expectedMigrations: readonly string[],
): Finding[] {
  const schema = checkSchema(
    facts.columns,
    facts.partitioned,
    facts.unusable,
    facts.role,
    facts.catalog,
  );
  const findings = [
    schema,
    checkMigrations(
      facts.migrationsRun,
      expectedMigrations,
      settings.migrationsTable,
      schema.level === 'ok',
      facts.migrationsSchema === null
        ? undefined
        : { role: facts.role, schema: facts.migrationsSchema },
    ),
    checkSynchronousCommit(facts.synchronousCommit, facts.database),
    checkTimeout('statement_timeout', facts.statementTimeoutMs, settings.leaseMs),
    checkTimeout('lock_timeout', facts.lockTimeoutMs, settings.leaseMs),
    checkPool(settings, facts.maxConnections, facts.reservedConnections),
  ];
  // The rest read idempotency_keys: without it (or out of reach) they have nothing to say.
  const keysOutOfReach = facts.unusable.some((u) => u.table === 'idempotency_keys');
  if (facts.columns.some((c) => c.table === 'idempotency_keys') && !keysOutOfReach) {
    findings.push(checkPartitions(facts.partitioned, facts.partitions, facts.now));
    const owners = facts.partitioned
      ? checkPartitionOwners(facts.keysOwner, facts.partitions)
      : undefined;
    if (owners !== undefined) findings.push(owners);
    if (facts.partitioned) {
      findings.push(...checkPendingDetaches(facts.keysOwner, facts.keysTable, facts.partitions));
    }
    findings.push(checkStuckKeys(facts.stuckKeys, facts.oldestStuckMs, settings.stuckAfterMs));
  }
  return findings;
}

const LABELS: Record<FindingLevel, string> = { ok: 'ok', warn: 'warn', fail: 'FAIL' };

/** The report: one line per finding, then the tally. */
export function formatFindings(findings: readonly Finding[]): string {
  const lines = findings.map((f) => `${LABELS[f.level].padEnd(4)}  ${f.topic}: ${f.message}`);
  const problems = findings.filter((f) => f.level === 'fail').length;
  const warnings = findings.filter((f) => f.level === 'warn').length;
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  lines.push(
    problems === 0 && warnings === 0
      ? 'No problems found.'
      : `${plural(problems, 'problem')}, ${plural(warnings, 'warning')}.`,
  );
  return `${lines.join('\n')}\n`;
}
