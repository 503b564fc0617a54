import { epochMsOf } from '../../connection/epoch-ms.js';
import { FOUND_ROW, heldRow, keyLock, HOLDS_NO_JOB_STEPS } from '../postgres-statements.js';

/**
 * The statements of the partitioned layout (`PartitionIdempotencyKeys`) that differ from the
 * plain table's. Taking over, finishing, advancing, releasing and extending select the row by
 * `tenant_id` and `key` and are shared: they find it in whichever partition holds it.
 */

/**
 * Statements 1 and 2: `idempotency_claim()` returns CLAIM's columns (see the migration). Its
 * key's advisory lock is tried first (see `keyLock`): held by a claim not committed yet, the
 * key is answered by its row if one can be seen, else as held (`heldRow`), where the function
 * would wait for that commit.
 */
export const CLAIM_IN_PARTITIONS = {
  name: 'idempotency_claim_partitioned_v2',
  text: `WITH lock AS MATERIALIZED (
  SELECT pg_try_advisory_xact_lock(${keyLock('$1::text', '$2::text')}) AS free
)
SELECT c.* FROM (SELECT FROM lock WHERE free) l
CROSS JOIN LATERAL idempotency_claim($1, $2, $3, $4) c
UNION ALL
SELECT ${FOUND_ROW}
FROM lock, idempotency_keys k
WHERE NOT lock.free AND k.tenant_id = $1 AND k.key = $2
UNION ALL
${heldRow('$3::bytea')}
FROM lock
WHERE NOT lock.free AND NOT EXISTS (SELECT FROM idempotency_keys WHERE tenant_id = $1 AND key = $2)`,
};

/**
 * CLAIM_IN_PARTITIONS for a batch (`ClaimBatcher`): `idempotency_claim()` once per claim whose
 * key's lock it got, in the batch's order, in one statement and one transaction, each row with
 * its claim's place (`i`, from 1). Each call reads a fresh snapshot after its lock, as the
 * function requires.
 */
export const CLAIM_BATCH_IN_PARTITIONS = {
  name: 'idempotency_claim_batch_partitioned_v2',
  text: `WITH locks AS MATERIALIZED (
  SELECT b.*, pg_try_advisory_xact_lock(${keyLock('b.tenant_id', 'b.key')}) AS free
  FROM unnest($1::text[], $2::text[], $3::bytea[], $4::float8[])
    WITH ORDINALITY AS b(tenant_id, key, fingerprint, lease_ms, i)
  ORDER BY b.i
)
SELECT * FROM (
  SELECT b.i, c.* FROM (SELECT * FROM locks WHERE free) b
  CROSS JOIN LATERAL idempotency_claim(b.tenant_id, b.key, b.fingerprint, b.lease_ms) c
  UNION ALL
  SELECT b.i, ${FOUND_ROW}
  FROM locks b JOIN idempotency_keys k ON k.tenant_id = b.tenant_id AND k.key = b.key
  WHERE NOT b.free
  UNION ALL
  SELECT b.i, ${heldRow('b.fingerprint').replace('SELECT ', '')}
  FROM locks b
  WHERE NOT b.free AND NOT EXISTS (
    SELECT FROM idempotency_keys k WHERE k.tenant_id = b.tenant_id AND k.key = b.key)
) claims
ORDER BY i`,
};

/**
 * Makes the partitions from now to `$2` partitions of `$1` ms ahead; returns how many
 * milliseconds from now are covered.
 */
export const CREATE_PARTITIONS = {
  name: 'idempotency_create_partitions_v1',
  text: `SELECT idempotency_keys_create_partitions($1, $2) AS covered_ms`,
};

/**
 * The partitions and their bounds, as milliseconds since 1970 (`epochMsOf`: a timestamp's text
 * follows the session's `DateStyle`), with whether the session's role may drop each (it owns
 * it, as a member of its owner or of its schema's owner: what DROP TABLE asks) and its owner.
 */
export const LIST_PARTITIONS = `SELECT p.partition::text AS partition,
  ${epochMsOf('p.from_at')} AS from_ms, ${epochMsOf('p.to_at')} AS to_ms,
  p.detach_pending, o.droppable, o.owner
FROM idempotency_key_partitions() p
CROSS JOIN LATERAL (SELECT pg_has_role(c.relowner, 'USAGE') OR pg_has_role(n.nspowner, 'USAGE')
    AS droppable, pg_get_userbyid(c.relowner)::text AS owner
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p.partition) o`;

/**
 * Each partition with its owner, the keys table's owner, and what `handOvers` needs to know
 * whether this session's role may give the one to the other (see partition-hand-over.ts). A
 * detach left pending is the expiry's to finish, not to give. `pg_has_role(..., 'MEMBER')`:
 * ALTER ... OWNER TO asks for membership in the new owner, not its privileges.
 */
export const PARTITION_OWNERS = {
  name: 'idempotency_partition_owners_v1',
  text: `SELECT p.partition::text AS partition, n.nspname::text AS schema,
  pg_get_userbyid(c.relowner)::text AS owner, pg_get_userbyid(k.relowner)::text AS keys_owner,
  pg_has_role(c.relowner, 'USAGE') AS ours, pg_has_role(k.relowner, 'MEMBER') AS member_of_keys_owner,
  has_schema_privilege(k.relowner, c.relnamespace, 'CREATE') AS keys_owner_may_create
FROM idempotency_key_partitions() p
JOIN pg_class c ON c.oid = p.partition
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_class k ON k.oid = to_regclass('idempotency_keys')
WHERE NOT p.detach_pending`,
};

/**
 * What `detachMode` asks of the catalog: whether the keys table has a DEFAULT partition (an
 * operator's: the start-up check refuses one), from which PostgreSQL detaches nothing
 * `CONCURRENTLY`; and the partitions with a detach left pending that this session's role may
 * not drop (another role's, as LIST_PARTITIONS judges `droppable`), beside which PostgreSQL
 * detaches nothing `CONCURRENTLY` either, with their owners (for the warning). The warning's
 * statements are pasted into an operator's session, whose search path need not be the app's:
 * its names (`others_pending`, `keys_table`) come with their schema, quoted as SQL takes them.
 *
 * v3 (was v2): the names qualified with their schema, and the keys table's.
 * v2 (was idempotency_has_default_partition_v1): the pending detaches of other roles.
 */
export const DETACH_CONDITIONS = {
  name: 'idempotency_detach_conditions_v3',
  text: `SELECT EXISTS (SELECT FROM pg_partitioned_table
  WHERE partrelid = to_regclass('idempotency_keys') AND partdefid <> 0) AS has_default,
  (SELECT quote_ident(kn.nspname) || '.' || quote_ident(k.relname)
    FROM pg_class k JOIN pg_namespace kn ON kn.oid = k.relnamespace
    WHERE k.oid = to_regclass('idempotency_keys')) AS keys_table,
  coalesce(array_agg(quote_ident(n.nspname) || '.' || quote_ident(c.relname) ORDER BY p.from_at),
    '{}') AS others_pending,
  coalesce(array_agg(pg_get_userbyid(c.relowner)::text ORDER BY p.from_at), '{}')
    AS others_pending_owners
FROM idempotency_key_partitions() p
JOIN pg_class c ON c.oid = p.partition
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.detach_pending
  AND NOT (pg_has_role(c.relowner, 'USAGE') OR pg_has_role(n.nspowner, 'USAGE'))`,
};

/** The server's time to judge the partitions by (the transaction's, as `CARRY_FORWARD`'s). */
export const PARTITION_CLOCK = `SELECT ${epochMsOf('now()')} AS now_ms`;

/**
 * Moves the keys that must outlive the partition `[$1, $2)` into the live one: every key not
 * yet finished (it holds the claim id its external calls were keyed with; the abandoned-key
 * purge decides when it goes, by `created_at`, which this leaves alone) and every key finished
 * within the retention `$3`, such as one claimed long ago and finished late. The exact
 * complement of what the plain table's purge deletes.
 *
 * An update of `placed_at` moves the row between partitions. A fenced write that waits on the
 * row meanwhile fails with a serialization failure (40001) rather than missing the row, so its
 * request answers 503 and the retry finds the row where it went; the moved rows are ones no
 * live worker holds, as a rule (finished, or left by a crashed one).
 *
 * Where a row lands: `clock_timestamp()`, not `now()` (the partitions for "now" may have been
 * made after the statement's transaction began: the expiry behind a pooler runs in one), but
 * never past the newest partition. A purge that stalls past the partitions ahead (a paused
 * process, a lock wait on a carried row, a long run of drops on short partitions) would
 * otherwise find no partition for its clock and fail (23514); the newest partition was made
 * by this purge, after the one being dropped ended, so the row lands in it or later, and a
 * later `placed_at` only keeps a key longer. `greatest(... $2)` keeps the row out of the
 * partition being dropped whatever the catalog says.
 */
export const CARRY_FORWARD = `UPDATE idempotency_keys SET placed_at = greatest($2, least(
  clock_timestamp(),
  (SELECT max(coalesce(p.to_at, 'infinity')) FROM idempotency_key_partitions() p
   WHERE NOT p.detach_pending) - interval '1 microsecond'))
WHERE placed_at >= coalesce($1, '-infinity'::timestamptz) AND placed_at < $2
  AND NOT (state = 'done' AND finished_at < now() - $3 * interval '1 millisecond')`;

/**
 * The expired keys of the partition `[$1, $2)`, once CARRY_FORWARD moved those that must
 * outlive it: for a partition this role may not drop (`expirySteps`' `empty`). Through the keys
 * table, on which the role has DELETE; pruned to that partition. The same condition as
 * CARRY_FORWARD's complement, so a key finished meanwhile stays.
 */
export const DELETE_EXPIRED_IN_PARTITION = `DELETE FROM idempotency_keys
WHERE placed_at >= coalesce($1, '-infinity'::timestamptz) AND placed_at < $2
  AND state = 'done' AND finished_at < now() - $3 * interval '1 millisecond'`;

/**
 * The abandoned keys' purge. The plain table's statement matches rows by `ctid`, which on a
 * partitioned table names a row in every partition (it checks its conditions again, so it
 * deletes only abandoned keys, but would look in every partition for each). Here a row is its
 * partition (`tableoid`) and its `ctid`. A key holding a job's steps is kept, as there.
 *
 * v3 (was v2): keeps a step job's key whatever its lease, as PURGE_ABANDONED_BATCH v4.
 */
export const PURGE_ABANDONED_IN_PARTITIONS = {
  name: 'idempotency_purge_abandoned_partitioned_v3',
  text: `DELETE FROM idempotency_keys k USING (
  SELECT tableoid, ctid FROM idempotency_keys
  WHERE created_at < now() - $1 * interval '1 millisecond' AND state = 'started'
    AND (locked_until IS NULL OR locked_until < clock_timestamp())
    AND ${HOLDS_NO_JOB_STEPS}
  LIMIT $2 FOR UPDATE SKIP LOCKED) abandoned
WHERE k.tableoid = abandoned.tableoid AND k.ctid = abandoned.ctid`,
};
