/**
 * Fixed (session of 2026-12-07, third): the remedy gives each `_kept` partition to the keys
 * table's owner (`ALTER TABLE ... OWNER TO`), whoever runs it. Un-skipped.
 *
 * Adversary 110 (pool): the DEFAULT partition's remedy, run as printed by whoever an operator
 * runs SQL as (`psql -U postgres`, the DBA's role), makes its `_kept` partitions owned by that
 * role, not by the keys table's owner. The app's purge, logging in as the owner (the simplest
 * set-up: the app runs its migrations and owns its tables), later detaches such a partition
 * past the retention (`DETACH ... CONCURRENTLY`, the parent's owner may) and fails its
 * `DROP TABLE` ("must be owner of table idempotency_keys_..._kept"): the partition is left
 * behind detached, out of `idempotency_key_partitions()`, never dropped, the moved keys in it.
 * The remedy says its partitions are "dropped by the expiry once past retention".
 *
 * User code:
 *   a database the DBA made (owned by postgres), GRANT CREATE ON SCHEMA public TO app;
 *   the app logs in as `app`, which owns idempotency_keys (it ran the migrations);
 *   an operator, as postgres, runs the refusal's remedy for a DEFAULT partition holding keys:
 *   psql -U postgres -c "BEGIN; SET LOCAL search_path = public; ...; COMMIT"
 *   IdempotencyModule.forRoot({ ..., partitionedExpiry: true, purgeIntervalMs })
 *
 * Code path: lib/schema/default-partition-remedy.ts (`CREATE TABLE %I (LIKE idempotency_keys
 * ...)`: owned by the session's role); lib/claim/partitioned/partitioned-postgres-claim.store.ts
 * `expire` (DETACH CONCURRENTLY, then DROP TABLE).
 *
 * Docs quote: docs/operations/partitioned-expiry.md "No DEFAULT partition ... the statements
 * detach it, give its keys range partitions of their own (one per gap between the partitions
 * that its keys fall in, made in the keys table's schema, dropped by the expiry once past
 * retention), move them there and drop the emptied table, all in one transaction".
 *
 * Severity: medium (the moved keys' partitions are never dropped: storage kept for ever, the
 * purge fails; the replay itself holds).
 *
 * Fails now: (un-skipped) the app's purge rejects with `must be owner of table
 * idempotency_keys_..._kept`, and the kept partition is left detached with its keys.
 *
 * Controls: the same remedy run as the app's role (the owner): the moved key replays its answer,
 * and past the retention the purge drops its partition (nothing left). (An app role that owns
 * the schema drops any table in it, so an app owning its database does not meet this.)
 *
 * Suggested fix: in the remedy, give each `_kept` partition to the keys table's owner (`EXECUTE
 * format('ALTER TABLE %I OWNER TO %I', part, (SELECT pg_get_userbyid(relowner) FROM pg_class
 * WHERE oid = 'idempotency_keys'::regclass))`), or say to run it as the table's owner.
 */
import { randomBytes } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { IdempotencyDatabase } from '../../../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../../../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { defaultPartitionRemedy } from '../../../lib/schema/default-partition-remedy.js';
import { adminUrl } from '../../support/database.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { describePartitioned } from '../../support/postgres-version.js';

if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

const PARTITION_MS = 1000;
const RETENTION_MS = 1500;
const fingerprint = Buffer.alloc(32, 3);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const suffix = randomBytes(4).toString('hex');
const app = `adv110_app_${suffix}`;

function urlAs(database: MigratedDatabase, user: string): string {
  const url = new URL(database.url);
  url.username = user;
  url.password = '';
  return url.toString();
}

/** Tables named like the partitions that are no partition of the keys table any more. */
async function orphans(database: MigratedDatabase): Promise<string[]> {
  const rows = (await database.dataSource.query(
    `SELECT c.relname::text AS name FROM pg_class c
     WHERE c.relkind = 'r' AND c.relname LIKE 'idempotency\\_keys\\_2%'
       AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)`,
  )) as { name: string }[];
  return rows.map((row) => row.name);
}

/**
 * A database the app's role owns, with a DEFAULT partition holding a finished key (claimed
 * while no partition covered its time); the remedy run by `operator` (a URL).
 */
async function story(label: string, remedyAsApp: boolean) {
  const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  try {
    return await storyOn(database, remedyAsApp);
  } finally {
    await database.drop();
  }
}

async function storyOn(database: MigratedDatabase, remedyAsApp: boolean) {
  const q = (sql: string) => database.dataSource.query(sql);
  await q(`DO $$ BEGIN CREATE ROLE ${app} LOGIN; EXCEPTION WHEN duplicate_object THEN END $$`);
  for (const table of [
    'idempotency_keys',
    'idempotency_keys_legacy',
    'processed_messages',
    'message_failures',
    'idempotency_response_bodies',
  ]) {
    await q(`ALTER TABLE ${table} OWNER TO ${app}`);
  }
  await q(`GRANT CREATE ON SCHEMA public TO ${app}`);
  await q('CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT');
  await q(`ALTER TABLE idempotency_keys_default OWNER TO ${app}`);
  await database.dataSource.query(
    `SELECT claimed FROM idempotency_claim('r', 'moved', $1, 60000)`,
    [fingerprint],
  );
  await q(
    `UPDATE idempotency_keys SET state = 'done', response_code = 201, response_body = '"once"',
       response_headers = '{}', finished_at = now() WHERE key = 'moved'`,
  );
  const remedy = defaultPartitionRemedy('public.idempotency_keys_default', 'public');
  const source = new DataSource({ type: 'postgres', url: urlAs(database, app) });
  await source.initialize();
  try {
    if (remedyAsApp) await source.query(remedy);
    else await q(remedy);
    const store = new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => source, 5000), {
      partitionMs: PARTITION_MS,
      partitionsAhead: 2,
    });
    const retry = await store.claim({ tenantId: 'r', key: 'moved' }, fingerprint, 60_000);
    await sleep(PARTITION_MS * 2 + RETENTION_MS + 1200);
    const purge = await store.purgeBatch(RETENTION_MS).then(
      () => 'ok',
      (error: unknown) => String(error).replace(/_\d{8}t\d+_kept/, '_<lo>_kept'),
    );
    return { retry: retry.kind, purge, orphans: (await orphans(database)).length };
  } finally {
    await source.destroy();
  }
}

describePartitioned(
  'adversary 110 pool: the DEFAULT remedy as postgres leaves partitions the app cannot drop',
  () => {
    afterAll(async () => {
      const root = new Client({ connectionString: adminUrl() });
      await root.connect();
      await root.query(`DROP ROLE IF EXISTS ${app}`);
      await root.end();
    });

    it('control: the remedy run as the owner: the moved key replays, then expires with its partition', async () => {
      const outcome = await story('adv110_pool_default_as_owner', true);
      expect(outcome.retry).not.toBe('claimed');
      expect(outcome).toMatchObject({ purge: 'ok', orphans: 0 });
    }, 60_000);

    it('the remedy run as postgres: its partitions expire too', async () => {
      const outcome = await story('adv110_pool_default_as_postgres', false);
      expect(outcome.retry).not.toBe('claimed');
      // Observed: { purge: 'error: must be owner of table idempotency_keys_<lo>_kept', orphans: 1 }.
      expect(outcome).toMatchObject({ purge: 'ok', orphans: 0 });
    }, 60_000);
  },
);
