/**
 * Fixed (session of 2026-12-07): the doctor reads the partitions pending detach too (lib/cli/
 * database.ts `PARTITION_FACTS`), counts none of them as covering time (`checkPartitions`), and
 * warns of each one the keys table's owner may not drop, with what its owner or a superuser
 * runs, names qualified with their schema and quoted by the catalog (`checkPendingDetaches` in
 * lib/cli/doctor-checks.ts, `pendingDetachRemedy` in lib/claim/partitioned/
 * pending-detach-remedy.ts). The store's own once-per-process warning now qualifies its names
 * the same way (`DETACH_CONDITIONS` v3).
 *
 * Adversary 115 (pool): the doctor says nothing of another role's detach left pending, which no
 * purge of the app's will ever finish. A purge of the API role (an app role of its own, its
 * partitions its own: the keys table's owner lacks CREATE on the schema, so the hand-over is
 * blocked) is stopped during its `DETACH ... CONCURRENTLY` (a deploy, its statement timeout
 * behind a backup's snapshot). The API's instances are then retired (credentials rotated, a
 * service split): the worker's purges leave that pending detach alone (finished, the worker
 * could not drop it), log it once per process, and from then on detach every expired partition
 * under the table's ACCESS EXCLUSIVE lock (claims wait up to 2 s each time) instead of
 * `CONCURRENTLY`, for good. The operator's tool for such states, `doctor`, reads the partitions
 * `WHERE NOT p.detach_pending` (lib/cli/database.ts) and prints nothing about it: no owner
 * line, no FINALIZE remedy; the partition (and the keys in it, out of every claim's sight)
 * stays for ever unless someone reads the one log line of a process started weeks ago.
 *
 * User code:
 *   CREATE ROLE migrator; (tables given to it, no CREATE on public)
 *   CREATE ROLE api LOGIN; CREATE ROLE worker LOGIN; GRANT migrator TO api, worker; ...
 *   both run IdempotencyModule.forRoot({ ..., partitionedExpiry: true }); the API's purge is
 *   stopped mid-detach; the API retired; ops: `nestjs-idempotency-pg doctor`.
 *
 * Code path: lib/cli/database.ts `readDoctorFacts` (`WHERE NOT p.detach_pending`),
 * lib/cli/doctor-checks.ts `checkPartitionOwners`, `checkPartitions` (no finding for a pending
 * detach); the store's only report: partitioned-postgres-claim.store.ts
 * `warnOtherRolesPendingDetach` (once per process).
 *
 * Docs quote: docs/operations/partitioned-expiry.md: "`doctor` warns of every partition the
 * keys table's owner may not drop"; the brief's promise: "a misconfiguration (roles, owners,
 * privileges, foreign partitions) caught at start-up or by the doctor with what to do".
 *
 * Severity: medium (a stated check silent on a state that lasts for ever: claims stalled at
 * each purge step, a partition never dropped; nothing run twice, no replay wrong).
 *
 * Fails now: (un-skipped) the doctor's output names no pending partition (no line mentions
 * it, nor FINALIZE); its only partitions line is `ok    partitions: 1 ahead of the live one,
 * 1 h wide`.
 *
 * Controls: the same partition of the API's left attached (no pending detach): the doctor
 * warns `1 partition owned by adv115_papi_..., which the keys table's owner ... may not drop`.
 *
 * Suggested fix: read the pending detaches in `readDoctorFacts` too and warn of each the keys
 * table's owner may not drop, with the store's remedy (as its owner: ALTER TABLE <keys>
 * DETACH PARTITION <it> FINALIZE; DROP TABLE <it>), names qualified with their schema.
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
const owner = `adv115_pown_${suffix}`;
const api = `adv115_papi_${suffix}`;
const worker = `adv115_pwrk_${suffix}`;

function urlAs(db: MigratedDatabase, user: string): string {
  const url = new URL(db.url);
  url.username = user;
  url.password = '';
  return url.toString();
}

/**
 * The keys table the owner's; the partitions made, all the owner's but the first one ahead,
 * the API's: its detach left pending when `pending`, else left attached. Its bare name.
 */
async function setUp(label: string, pending: boolean): Promise<[MigratedDatabase, string]> {
  const db = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  const q = (sql: string, values?: unknown[]) => db.dataSource.query(sql, values);
  await q(`DO $$ BEGIN CREATE ROLE ${owner}; EXCEPTION WHEN duplicate_object THEN END $$`);
  for (const table of ['idempotency_keys', 'idempotency_keys_legacy']) {
    await q(`ALTER TABLE ${table} OWNER TO ${owner}`);
  }
  for (const role of [api, worker]) {
    await q(`DO $$ BEGIN CREATE ROLE ${role} LOGIN; EXCEPTION WHEN duplicate_object THEN END $$`);
    await q(`GRANT ${owner} TO ${role}`);
    await q(`GRANT CREATE ON SCHEMA public TO ${role}`);
    await q(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}`);
  }
  await q('SELECT idempotency_keys_create_partitions(3600000, 2)');
  const parts = (await q(
    'SELECT p.partition::text AS name, p.from_at > now() AS ahead FROM idempotency_key_partitions() p ORDER BY p.from_at',
  )) as { name: string; ahead: boolean }[];
  for (const { name } of parts) await q(`ALTER TABLE ${name} OWNER TO ${owner}`);
  const apis = parts.filter((p) => p.ahead)[0].name;
  await q(`ALTER TABLE ${apis} OWNER TO ${api}`);
  if (pending) {
    // An older snapshot open (a backup), so the API's concurrent detach waits; its statement
    // timeout stops it there, as the library's purge is stopped.
    const holder = new Client({ connectionString: db.url });
    await holder.connect();
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT count(*) FROM idempotency_keys');
    const apiClient = new Client({ connectionString: urlAs(db, api) });
    await apiClient.connect();
    await apiClient.query('SET statement_timeout = 1000');
    await apiClient
      .query(`ALTER TABLE idempotency_keys DETACH PARTITION ${apis} CONCURRENTLY`)
      .catch(() => undefined);
    await apiClient.end();
    await holder.query('COMMIT');
    await holder.end();
    const [{ n }] = (await q(
      'SELECT count(*)::int AS n FROM idempotency_key_partitions() WHERE detach_pending',
    )) as { n: number }[];
    if (n !== 1) throw new Error('no pending detach');
  }
  return [db, apis];
}

async function doctorLines(db: MigratedDatabase): Promise<string[]> {
  const { stdout } = await runCli(['doctor', '--url', db.url]);
  return stdout.split('\n');
}

describePartitioned(
  "adversary 115 pool: the doctor is silent on another role's pending detach",
  () => {
    const dbs: MigratedDatabase[] = [];

    afterAll(async () => {
      for (const db of dbs) await db.drop();
      const root = new Client({ connectionString: adminUrl() });
      await root.connect();
      for (const role of [api, worker, owner]) await root.query(`DROP ROLE IF EXISTS ${role}`);
      await root.end();
    });

    it("control: the API's partition attached: the doctor warns of it, naming its owner", async () => {
      const [db] = await setUp('adv115_pool_pend_attached', false);
      dbs.push(db);
      const lines = await doctorLines(db);
      expect(lines.filter((l) => /^warn\s+partitions:/.test(l))).toEqual([
        expect.stringContaining(`1 partition owned by ${api}, which the keys table's owner`),
      ]);
    }, 120_000);

    it("the API's pending detach: the doctor names it with its remedy", async () => {
      const [db, partition] = await setUp('adv115_pool_pend_left', true);
      dbs.push(db);
      const lines = await doctorLines(db);
      // Observed: no line names it; `ok    partitions: ...` and no owners' warning.
      const named = lines.filter((l) => l.includes(partition) && /FINALIZE/.test(l));
      expect({
        named: named.length,
        partitions: lines.filter((l) => /partitions:/.test(l)),
      }).toEqual({
        named: 1,
        partitions: expect.anything(),
      });
    }, 120_000);
  },
);
