/**
 * Fixed (session of 2026-12-07, third): the remedy makes each `_kept` partition's unique
 * `(tenant_id, key)` index, as the library's partitions have. Un-skipped.
 *
 * Adversary 110 (pool): the DEFAULT partition's remedy moves the keys into `_kept` range
 * partitions made `(LIKE idempotency_keys INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, which
 * carries no index on `(tenant_id, key)`: the partitioned table has none to inherit (each of
 * the library's partitions gets its own, `CREATE UNIQUE INDEX ..._key` in
 * `idempotency_keys_create_partitions()`). Every claim looks its key up in every partition
 * (`idempotency_claim()`), so from the remedy on each claim of the app reads the whole of every
 * `_kept` partition, until they expire a retention later. The docs say the DEFAULT partition of
 * a database an earlier release ran on holds "every key claimed since its partitions ahead ran
 * out": with 500 000 keys moved a claim took 230-300 ms here (against well under 1 ms), so a
 * busy app's keyed requests queue and time out for a day. The `(tenant_id, key)` uniqueness
 * backstop of each partition is missing there too.
 *
 * User code: the refusal's remedy for a DEFAULT partition, run as printed
 * (`BEGIN; SET LOCAL search_path = public; ...; COMMIT`), then the app started again.
 *
 * Code path: lib/schema/default-partition-remedy.ts (`CREATE TABLE %I (LIKE idempotency_keys
 * INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, no index made); migrations/partition-functions.ts
 * CREATE_PARTITIONS_FUNCTION (`CREATE UNIQUE INDEX %I ON %I (tenant_id, key)` for its own).
 *
 * Docs quote: docs/operations/partitioned-expiry.md "give its keys range partitions of their
 * own ... move them there and drop the emptied table"; "At the default width, a retention's 8
 * partitions and those ahead, a claim is as quick as on the plain table".
 *
 * Severity: medium (every keyed request slowed by a full read of the moved keys for a
 * retention: timeouts and 503s under load with a large DEFAULT partition; no wrong answer).
 *
 * Fails now: (un-skipped) the `_kept` partition has no unique index on (tenant_id, key), and
 * the claim's lookup of a key plans a Seq Scan on it.
 *
 * Controls: the partitions the library makes hold that index, and the same lookup uses it there.
 *
 * Suggested fix: in the remedy, `EXECUTE format('CREATE UNIQUE INDEX %I ON %I (tenant_id, key)',
 * part || '_key', part)` before the ATTACH (as the partition function does), after the rows are
 * moved or before (a duplicate key in the DEFAULT partition would then fail the transaction,
 * leaving everything as it was).
 */
import { Client } from 'pg';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { defaultPartitionRemedy } from '../../../lib/schema/default-partition-remedy.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { describePartitioned } from '../../support/postgres-version.js';

const KEYS = 100_000;

/** Per partition: whether it has a unique index on (tenant_id, key), and the lookup's plan. */
async function partitionsOf(client: Client, pattern: string) {
  const { rows } = await client.query<{ name: string; indexed: boolean }>(
    `SELECT c.relname::text AS name, EXISTS (
       SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisunique
         AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey::int2[])) = ARRAY['key', 'tenant_id']
     ) AS indexed
     FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
     WHERE h.inhparent = 'idempotency_keys'::regclass AND c.relname LIKE $1`,
    [pattern],
  );
  return rows;
}

async function lookupPlan(client: Client, partition: string): Promise<string> {
  await client.query('ANALYZE idempotency_keys');
  const { rows } = await client.query<{ 'QUERY PLAN': string }>(
    `EXPLAIN SELECT FROM ${partition} WHERE tenant_id = 't' AND key = 'k77'`,
  );
  return rows.map((row) => row['QUERY PLAN']).join('\n');
}

describePartitioned(
  'adversary 110 pool: the DEFAULT remedy makes partitions without the key index',
  () => {
    let database: MigratedDatabase;
    let client: Client;

    beforeAll(async () => {
      database = await createMigratedDatabase('adv110_pool_kept_index', [
        PartitionIdempotencyKeys1764461600000,
      ]);
      client = new Client({ connectionString: database.url });
      await client.connect();
      await client.query(
        'CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT',
      );
      // Keys claimed while no partition covered their time: all in the DEFAULT partition.
      await client.query(
        `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, response_code, finished_at)
       SELECT 't', 'k' || g, '\\x01', 'done', 201, now() FROM generate_series(1, $1::int) g`,
        [KEYS],
      );
      await client.query(defaultPartitionRemedy('public.idempotency_keys_default', 'public'));
      // The library's own partitions, as the app makes them on its first claim; and keys in them.
      await client.query('SELECT idempotency_keys_create_partitions(3600000, 2)');
      await client.query(
        `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state)
       SELECT 't', 'n' || g, '\\x01', 'started' FROM generate_series(1, $1::int) g`,
        [KEYS],
      );
    }, 120_000);

    afterAll(async () => {
      await client?.end();
      await database?.drop();
    });

    it("control: the library's partitions hold the unique (tenant_id, key) index and the lookup uses it", async () => {
      const made = await partitionsOf(client, 'idempotency\\_keys\\_2%000');
      expect(made.length).toBeGreaterThan(0);
      expect(made.every((partition) => partition.indexed)).toBe(true);
      const live = (
        await client.query<{ name: string }>(
          `SELECT tableoid::regclass::text AS name FROM idempotency_keys WHERE key = 'n1'`,
        )
      ).rows[0].name;
      expect(await lookupPlan(client, live)).not.toContain('Seq Scan');
    }, 60_000);

    it("the remedy's _kept partitions hold it too", async () => {
      const kept = await partitionsOf(client, '%\\_kept');
      expect(kept.length).toBe(1);
      // Observed: [{ name: 'idempotency_keys_<lo>_kept', indexed: false }], and a Seq Scan.
      expect(kept.map((partition) => partition.indexed)).toEqual([true]);
      expect(await lookupPlan(client, kept[0].name)).not.toContain('Seq Scan');
    }, 60_000);
  },
);
