/**
 * Fixed (session of 2026-12-07): the doctor's GRANT and ALTER quote the schema and owner names
 * SQL would not read bare (`sqlName`), as the store's warning does (lib/cli/doctor-checks.ts
 * `checkPartitionOwners`).
 *
 * Adversary 114 (pool): the doctor's remedy for partitions the keys table's owner may not drop
 * prints the owner's and the schema's names unquoted, so for a role whose name needs quotes
 * (`"keys-owner"`, `"Migrator"`, any name PostgreSQL folds or cannot read bare) the GRANT fails
 * as printed: a syntax error, or a grant to another role than the owner. The store's own
 * warning for the same case quotes both (`quoteName`), the doctor's does not.
 *
 * User code:
 *   CREATE ROLE "idem-owner"; ALTER TABLE idempotency_keys OWNER TO "idem-owner";
 *   CREATE ROLE api LOGIN; GRANT "idem-owner" TO api; GRANT CREATE ON SCHEMA public TO api;
 *   (the owner without CREATE on public: a superuser gave it the tables); partitions made by
 *   the api; then: npx nestjs-idempotency-pg doctor --url postgres://... and paste the GRANT.
 *
 * Code path: lib/cli/doctor-checks.ts `checkPartitionOwners`:
 *   `GRANT CREATE ON SCHEMA ${schemas.join(', ')} TO ${keysOwner}` (and
 *   "ALTER TABLE ... OWNER TO " + keysOwner), names as the catalog gives them.
 *
 * Docs quote: the brief's promise "misconfiguration fails at start-up with a remedy that works
 * as printed"; the doctor: "To have them dropped: GRANT CREATE ON SCHEMA ... TO ...".
 *
 * Severity: low (a printed remedy that fails on a syntax error for such names: clear enough
 * to an operator who reads it, nothing lost).
 *
 * Fails now: (un-skipped) the doctor prints `GRANT CREATE ON SCHEMA public TO adv114-own-<x>`
 * and running it fails: `syntax error at or near "-"`.
 *
 * Controls: the same with an owner named `adv114_own_<x>`: the doctor's GRANT runs, and after
 * it the doctor no longer names the schema.
 *
 * Suggested fix: quote both with `quoteName` (lib/schema/sql-name.ts `sqlName`), as the
 * store's `warnHandOverBlocked` does.
 */
import { randomBytes } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { Client } from 'pg';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { runCli } from '../../support/cli-process.js';
import { adminUrl } from '../../support/database.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { describePartitioned } from '../../support/postgres-version.js';

if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

const suffix = randomBytes(4).toString('hex');
const api = `adv114_dapi_${suffix}`;
const plainOwner = `adv114_own_${suffix}`;
const oddOwner = `adv114-own-${suffix}`;

function urlAs(db: MigratedDatabase, user: string): string {
  const url = new URL(db.url);
  url.username = user;
  url.password = '';
  return url.toString();
}

/** The keys table given to `owner` (no CREATE on public); partitions made by the api role. */
async function setUp(label: string, owner: string) {
  const db = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  const q = (sql: string) => db.dataSource.query(sql);
  const o = `"${owner}"`;
  await q(`DO $$ BEGIN CREATE ROLE ${o}; EXCEPTION WHEN duplicate_object THEN END $$`);
  for (const table of ['idempotency_keys', 'idempotency_keys_legacy']) {
    await q(`ALTER TABLE ${table} OWNER TO ${o}`);
  }
  await q(`DO $$ BEGIN CREATE ROLE ${api} LOGIN; EXCEPTION WHEN duplicate_object THEN END $$`);
  await q(`GRANT ${o} TO ${api}`);
  await q(`GRANT CREATE ON SCHEMA public TO ${api}`);
  await q(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${api}`);
  const maker = new Client({ connectionString: urlAs(db, api) });
  await maker.connect();
  await maker.query('SELECT idempotency_keys_create_partitions(3600000, 2)');
  await maker.end();
  return db;
}

async function doctorGrant(db: MigratedDatabase): Promise<string | undefined> {
  const { stdout } = await runCli(['doctor', '--url', db.url]);
  const line = stdout.split('\n').find((l) => /^\w+\s+partitions:.*GRANT CREATE/.test(l));
  return line === undefined
    ? undefined
    : /(GRANT CREATE ON SCHEMA .+?) \(PostgreSQL/.exec(line)?.[1];
}

async function run(db: MigratedDatabase, sql: string): Promise<string> {
  return db.dataSource.query(sql).then(
    () => 'ok',
    (error: unknown) => String(error),
  );
}

describePartitioned('adversary 114 pool: the doctor prints an owner name unquoted', () => {
  const dbs: MigratedDatabase[] = [];

  afterAll(async () => {
    for (const db of dbs) await db.drop();
    const root = new Client({ connectionString: adminUrl() });
    await root.connect();
    for (const role of [api, plainOwner, oddOwner]) {
      await root.query(`DROP ROLE IF EXISTS "${role}"`);
    }
    await root.end();
  });

  it("control: an owner named plainly: the doctor's GRANT runs and the warning's GRANT goes", async () => {
    const db = await setUp('adv114_pool_doctor_plain', plainOwner);
    dbs.push(db);
    const grant = await doctorGrant(db);
    expect(grant).toBe(`GRANT CREATE ON SCHEMA public TO ${plainOwner}`);
    expect(await run(db, grant!)).toBe('ok');
    expect(await doctorGrant(db)).toBeUndefined();
  }, 120_000);

  it("an owner whose name needs quotes: the doctor's GRANT runs as printed (round 114)", async () => {
    const db = await setUp('adv114_pool_doctor_odd', oddOwner);
    dbs.push(db);
    const grant = await doctorGrant(db);
    expect(grant).toBeDefined();
    // Observed: GRANT CREATE ON SCHEMA public TO adv114-own-<x>: syntax error at or near "-".
    expect({ grant, result: await run(db, grant!) }).toEqual({ grant, result: 'ok' });
  }, 120_000);
});
