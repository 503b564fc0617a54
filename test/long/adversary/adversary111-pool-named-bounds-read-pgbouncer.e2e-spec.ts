/**
 * Fixed (session of 2026-12-07, fourth): the bounds read is unnamed (lib/idempotency-schema.check.ts),
 * which it can be since `runSurrounded` sends every statement of its own with the extended
 * protocol (session-state.ts `requiresPreparation`: before, an unnamed statement without
 * values went as a simple query, skipping the pinned path set before it).
 *
 * Adversary 111 (pool): the start-up check's new partition-bounds read
 * (`idempotency_partition_bounds_v1`) is sent as a NAMED prepared statement whatever the
 * `pooler` option says; every other statement of the library is sent unnamed behind a pooler
 * in transaction mode. Behind PgBouncer in transaction mode (without protocol-level prepared
 * statement support: PgBouncer before 1.21, or `max_prepared_statements = 0`) the name stays
 * on the server connection the first app instance's check ran on. The next instance whose
 * check lands there (a rolling deploy, a restart, a second replica: the server connections are
 * shared) gets `42P05 prepared statement "idempotency_partition_bounds_v1" already exists`,
 * which the check takes for an unreachable database: it does not refuse, the app starts, and
 * the check runs again (and fails again) before every statement, for as long as PgBouncer keeps
 * that server connection. So the start-up check is silently off: an operator's partition
 * `TO (MAXVALUE)` (which the docs say is refused at start-up, and which the first instance
 * did refuse) is let through by the restarted one, and every statement logs a warning.
 *
 * User code:
 *   PgBouncer 1.18, pool_mode = transaction (docs/operations/poolers.md: "tested here")
 *   IdempotencyModule.forRoot({ ..., pooler: 'transaction', partitionedExpiry: true })
 *   two instances of the app (or one restarted) on that PgBouncer.
 *
 * Code path: lib/idempotency-schema.check.ts `check` (`libraryStatement` with
 * `{ name: 'idempotency_partition_bounds_v1', text: PARTITION_BOUNDS_QUERY }`, not
 * `this.database.namedStatements`); its catch ("could not be read ... checked again") returns
 * false; lib/data-layers/idempotency-database.ts `ready`/`checkSchemaFirst` (the statement
 * then runs unchecked).
 *
 * Docs quote: docs/operations/poolers.md "PgBouncer in **transaction** mode | default (found,
 * run as 'transaction'), or pooler: 'transaction'"; lib/data-layers/idempotency-database.ts
 * "'transaction': ... statements are sent unnamed"; docs/reference/start-up-checks.md (an
 * operator's partition up to MAXVALUE is refused at start-up, saying how to give it an end).
 *
 * Severity: medium (the start-up check is skipped for good behind PgBouncer: a misconfigured
 * layout is served instead of refused (its keys then never expire), a warning and a failed
 * check before every statement; nothing answered twice).
 *
 * Fails now: (un-skipped) the first instance refuses (`idempotency_keys has a partition without
 * an end`); the second, on the same PgBouncer, resolves its start-up
 * (`second: 'started'`), its log: `the idempotency schema could not be read (error: prepared
 * statement "idempotency_partition_bounds_v1" already exists); it is checked again before the
 * next statement`.
 *
 * Controls: the same two instances straight to PostgreSQL (no pooler): both refuse.
 *
 * Suggested fix: send it as the library's other statements are:
 * `name: this.database.namedStatements ? 'idempotency_partition_bounds_v1' : undefined`
 * (or never named: it runs once per start); and take a 42P05/26000 at the check for a
 * pooler's misfit, not an outage.
 */
import { randomBytes } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { IdempotencyDatabase } from '../../../lib/data-layers/idempotency-database.js';
import { IdempotencySchemaCheck } from '../../../lib/idempotency-schema.check.js';
import { type ResolvedIdempotencyOptions } from '../../../lib/shapes/idempotency-options.interface.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startPgBouncer, type TestPgBouncer } from '../../support/pgbouncer.js';
import { describePartitioned } from '../../support/postgres-version.js';

const HOUR = 3_600_000;
const options = {
  retentionMs: 24 * HOUR,
  partitionedExpiry: { partitionMs: 3 * HOUR, partitionsAhead: 2 },
} as unknown as ResolvedIdempotencyOptions;

const warnings: string[] = [];
Logger.overrideLogger({
  warn: (message: unknown) => void warnings.push(String(message)),
  error: () => undefined,
  log: () => undefined,
});

/** An app instance's start-up check on `url`: 'started', or its refusal. */
async function startUp(url: string, pooler: 'transaction' | undefined, sources: DataSource[]) {
  const source = new DataSource({ type: 'postgres', url });
  await source.initialize();
  sources.push(source);
  const database = new IdempotencyDatabase(() => source, 5000, pooler);
  return new IdempotencySchemaCheck(database, options).onApplicationBootstrap().then(
    () => 'started',
    (error: unknown) =>
      String(error).includes('idempotency_keys has a partition without an end')
        ? 'refused: a partition without an end'
        : String(error),
  );
}

describePartitioned('adversary 111 pool: the named bounds read behind PgBouncer', () => {
  let db: MigratedDatabase;
  let bouncer: TestPgBouncer;
  const sources: DataSource[] = [];
  const refused = 'refused: a partition without an end';

  beforeAll(async () => {
    db = await createMigratedDatabase('adv111_pool_named_bounds', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    // An operator's net: refused at start-up (docs/reference/start-up-checks.md).
    const rest = `idempotency_keys_rest_${randomBytes(2).toString('hex')}`;
    await db.dataSource.query(
      `CREATE TABLE ${rest} PARTITION OF idempotency_keys FOR VALUES FROM ('2100-01-01') TO (MAXVALUE)`,
    );
    bouncer = await startPgBouncer({ poolMode: 'transaction', poolSize: 1 });
  }, 60_000);

  afterAll(async () => {
    for (const source of sources) await source.destroy().catch(() => undefined);
    await bouncer?.stop();
    await db?.drop();
  });

  it('control: straight to PostgreSQL, both instances refuse the net', async () => {
    const first = await startUp(db.url, undefined, sources);
    const second = await startUp(db.url, undefined, sources);
    expect({ first, second }).toEqual({ first: refused, second: refused });
  }, 30_000);

  it('behind PgBouncer in transaction mode, a second instance refuses it too', async () => {
    const name = new URL(db.url).pathname.slice(1);
    const first = await startUp(bouncer.url(name), 'transaction', sources);
    const second = await startUp(bouncer.url(name), 'transaction', sources);
    const misread = warnings.filter((w) => w.includes('idempotency_partition_bounds_v1'));
    // Observed: { first: refused, second: 'started', misread: ['the idempotency schema could
    // not be read (error: prepared statement "idempotency_partition_bounds_v1" already exists) ...'] }.
    expect({ first, second, misread }).toEqual({ first: refused, second: refused, misread: [] });
  }, 30_000);
});
