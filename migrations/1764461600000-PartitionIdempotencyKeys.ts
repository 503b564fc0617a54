import { type MigrationInterface, type QueryRunner } from 'typeorm';
import { CREATE_PARTITIONS_FUNCTION, PARTITIONS_FUNCTION } from './partition-functions.js';

/**
 * The keys table's columns and checks as the plain migrations leave them: the partitioned
 * table has them all (and `placed_at`), and `down()` makes the plain table from them again.
 */
const KEY_COLUMNS = `tenant_id        text        NOT NULL,
        key              text        NOT NULL,
        fingerprint      bytea       NOT NULL,
        state            text        NOT NULL DEFAULT 'started',
        recovery_point   text        NOT NULL DEFAULT 'start',
        locked_until     timestamptz,
        lock_version     bigint      NOT NULL DEFAULT 0,
        response_code    int,
        response_body    bytea,
        created_at       timestamptz NOT NULL DEFAULT now(),
        claim_id         uuid        NOT NULL DEFAULT gen_random_uuid(),
        response_headers jsonb,
        phase_results    jsonb       NOT NULL DEFAULT '{}',
        finished_at      timestamptz,`;
/**
 * `leased_at` (AddLeasedAt, listed after this migration by its time) when the table has it: a
 * database that ran AddLeasedAt before this one. Its partitioned table (or, reverted, its
 * plain one) has it too, or ATTACH would refuse the old table and a revert would lose it.
 */
async function hasLeasedAt(queryRunner: QueryRunner, table: string): Promise<boolean> {
  const rows = (await queryRunner.query(
    `SELECT FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'leased_at'
       AND NOT attisdropped`,
    [table],
  )) as unknown[];
  return rows.length > 0;
}

const LEASED_AT_COLUMN = `leased_at        timestamptz,
        `;

const KEY_CHECKS = `CONSTRAINT idempotency_keys_key_check CHECK (length(key) BETWEEN 1 AND 255),
        CONSTRAINT idempotency_keys_state_check CHECK (state IN ('started', 'done')),
        CONSTRAINT idempotency_keys_tenant_id_length CHECK (length(tenant_id) BETWEEN 1 AND 255)`;

/**
 * Opt-in (not in `IDEMPOTENCY_MIGRATIONS`): turns `idempotency_keys` into a table partitioned by
 * time, for `partitionedExpiry`, so that expired keys go by dropping whole partitions instead of
 * a batched DELETE that leaves dead tuples for vacuum.
 *
 * The partition column is `placed_at`, when a row entered its partition: the purge carries the
 * keys that must outlive their partition (unfinished ones, late finishers) forward into the live
 * one, and only `placed_at` moves then. `created_at` keeps its one meaning (when the key was
 * first claimed), so the abandoned-key horizon and the oldest-unfinished gauge read as before.
 *
 * PostgreSQL requires a partitioned table's unique indexes to contain the partition column, so
 * `(tenant_id, key)` alone cannot be the table's primary key any more: each partition has its
 * own unique index, and `idempotency_claim()` keeps a key unique across all of them (see there).
 *
 * The existing table is not copied: it becomes the first partition, holding every row it had
 * (`placed_at` = the migration's time: a default that PostgreSQL evaluates once and keeps in
 * the catalog, not written into each row). Attaching it reads the table once to check its rows; it
 * is dropped as a whole once it is past the retention, its survivors carried forward first.
 *
 * Needs PostgreSQL 14 or later: the purge detaches partitions `CONCURRENTLY`. Before 14, both
 * detaching and dropping a partition lock the whole table, claims included.
 */
export class PartitionIdempotencyKeys1764461600000 implements MigrationInterface {
  name = 'PartitionIdempotencyKeys1764461600000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const [{ server_version_num }] = (await queryRunner.query('SHOW server_version_num')) as {
      server_version_num: string;
    }[];
    if (Number(server_version_num) < 140000) {
      throw new Error(
        'PartitionIdempotencyKeys needs PostgreSQL 14 or later (this server is ' +
          `${server_version_num}): expiry detaches partitions CONCURRENTLY, and before 14 ` +
          'detaching or dropping a partition locks every claim out.',
      );
    }
    const [{ relkind }] = (await queryRunner.query(
      `SELECT relkind FROM pg_class WHERE oid = 'idempotency_keys'::regclass`,
    )) as { relkind: string }[];
    if (relkind === 'p') {
      throw new Error('PartitionIdempotencyKeys: idempotency_keys is partitioned already.');
    }

    const leasedAt = await hasLeasedAt(queryRunner, 'idempotency_keys');
    // The table as it is becomes the first partition; its indexes are renamed out of the way
    // of the partitioned table's. Its primary key is that partition's unique index.
    await queryRunner.query(`ALTER TABLE idempotency_keys RENAME TO idempotency_keys_legacy`);
    await queryRunner.query(
      `ALTER INDEX idempotency_keys_pkey RENAME TO idempotency_keys_legacy_pkey`,
    );
    await queryRunner.query(
      `ALTER INDEX idempotency_keys_created_at_idx RENAME TO idempotency_keys_legacy_created_at_idx`,
    );
    await queryRunner.query(
      `ALTER TABLE idempotency_keys_legacy ADD COLUMN placed_at timestamptz NOT NULL DEFAULT now()`,
    );

    // Fill factor 70 is set on each partition (a partitioned table has no storage of its own).
    await queryRunner.query(`
      CREATE TABLE idempotency_keys (
        ${KEY_COLUMNS}
        ${leasedAt ? LEASED_AT_COLUMN : ''}placed_at        timestamptz NOT NULL DEFAULT now(),
        ${KEY_CHECKS}
      ) PARTITION BY RANGE (placed_at)`);

    await queryRunner.query(PARTITIONS_FUNCTION);
    await queryRunner.query(CREATE_PARTITIONS_FUNCTION);
    await queryRunner.query(CLAIM_FUNCTION);

    // The old rows all carry the migration's time, which their partition ends just after;
    // the store makes the partitions from there on, of the width the app configures, before
    // its first claim.
    await queryRunner.query(
      `ALTER TABLE idempotency_keys ATTACH PARTITION idempotency_keys_legacy
       FOR VALUES FROM (MINVALUE) TO (now() + interval '1 millisecond')`,
    );
    // Found on the legacy partition, this index is attached there rather than built again.
    await queryRunner.query(
      `CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys USING brin (created_at)
       WITH (autosummarize = on)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const leasedAt = await hasLeasedAt(queryRunner, 'idempotency_keys');
    await queryRunner.query(`ALTER TABLE idempotency_keys RENAME TO idempotency_keys_partitioned`);
    await queryRunner.query(
      `ALTER INDEX idempotency_keys_created_at_idx RENAME TO idempotency_keys_partitioned_created_at_idx`,
    );
    // The table as CreateIdempotencyKeys and the migrations after it leave it, the names of
    // its constraints included (the partitioned table, still there, holds the same names, so
    // PostgreSQL would pick others for unnamed ones).
    await queryRunner.query(`
      CREATE TABLE idempotency_keys (
        ${KEY_COLUMNS}
        ${leasedAt ? LEASED_AT_COLUMN : ''}CONSTRAINT idempotency_keys_pkey PRIMARY KEY (tenant_id, key),
        ${KEY_CHECKS}
      ) WITH (fillfactor = 70)`);
    // Every row, whichever partition holds it; a key is in one partition only, so the primary
    // key takes them all (were one in two, this would fail and roll the whole revert back).
    await queryRunner.query(`
      INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, recovery_point,
        locked_until, lock_version, response_code, response_body, created_at, claim_id,
        response_headers, phase_results, finished_at${leasedAt ? ', leased_at' : ''})
      SELECT tenant_id, key, fingerprint, state, recovery_point, locked_until, lock_version,
        response_code, response_body, created_at, claim_id, response_headers, phase_results,
        finished_at${leasedAt ? ', leased_at' : ''}
      FROM idempotency_keys_partitioned ORDER BY created_at`);
    await queryRunner.query(`DROP TABLE idempotency_keys_partitioned`);
    await queryRunner.query(
      `CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys USING brin (created_at)
       WITH (autosummarize = on)`,
    );
    await queryRunner.query(`DROP FUNCTION idempotency_claim(text, text, bytea, float8)`);
    await queryRunner.query(`DROP FUNCTION idempotency_keys_create_partitions(bigint, int)`);
    await queryRunner.query(`DROP FUNCTION idempotency_key_partitions()`);
  }
}

/**
 * The claim (the design's statements 1 and 2) on the partitioned table. \`INSERT ... ON
 * CONFLICT (tenant_id, key)\` cannot work there: no index covers the whole table, only each
 * partition, and a retry landing in the next partition would be inserted again and run twice.
 * So claims of one key are serialized by a transaction-level advisory lock on its hash, and
 * the key is looked up in every partition, then inserted only if absent. Columns as CLAIM's.
 *
 * Only under READ COMMITTED: each statement of this function then reads a fresh snapshot,
 * taken after the lock is held, so it sees a claim that committed while it waited. Under
 * REPEATABLE READ or SERIALIZABLE the snapshot predates the lock, the lookup would miss that
 * claim, and the key would be inserted twice: the function refuses to run instead.
 */
const CLAIM_FUNCTION = `
CREATE FUNCTION idempotency_claim(p_tenant_id text, p_key text, p_fingerprint bytea,
  p_lease_ms float8)
RETURNS TABLE (claimed boolean, claim_id uuid, lock_version bigint, fingerprint bytea,
  state text, lease_expired boolean, lease_seconds_left int, response_code int,
  response_body bytea, response_headers jsonb, finished_age_ms float8)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'idempotency_claim needs READ COMMITTED isolation, not %',
      upper(current_setting('transaction_isolation'))
      USING ERRCODE = '55000',
        DETAIL = 'Under a snapshot taken before its lock, a claim of the same key committed '
          'meanwhile would be missed and the key claimed twice.',
        HINT = 'Set default_transaction_isolation back to ''read committed'' for the '
          'connections of the app''s DataSource (the partitioned idempotency_keys needs it).';
  END IF;
  -- Length first, so that tenant 'ab' with key 'c' and tenant 'a' with key 'bc' differ.
  PERFORM pg_advisory_xact_lock(
    hashtextextended(length(p_tenant_id) || ':' || p_tenant_id || p_key, 1764461600000));
  RETURN QUERY
    SELECT false, k.claim_id, k.lock_version, k.fingerprint, k.state,
           k.locked_until IS NULL OR k.locked_until < clock_timestamp(),
           ceil(extract(epoch FROM k.locked_until - clock_timestamp()))::int,
           k.response_code, k.response_body, k.response_headers,
           (extract(epoch FROM clock_timestamp() - k.finished_at) * 1000)::float8
    FROM idempotency_keys k WHERE k.tenant_id = p_tenant_id AND k.key = p_key;
  IF FOUND THEN
    RETURN;
  END IF;
  RETURN QUERY
    INSERT INTO idempotency_keys AS k (tenant_id, key, fingerprint, locked_until)
    VALUES (p_tenant_id, p_key, p_fingerprint,
            clock_timestamp() + p_lease_ms * interval '1 millisecond')
    RETURNING true, k.claim_id, k.lock_version, NULL::bytea, NULL::text, NULL::boolean,
              NULL::int, NULL::int, NULL::bytea, NULL::jsonb, NULL::float8;
END
$$`;
