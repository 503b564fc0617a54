import { sqlName } from './sql-name.js';

/** The layout the app makes its partitions ahead with, for the partitions the remedy makes. */
export interface AheadLayout {
  partitionMs: number;
  partitionsAhead: number;
}

/** How long each try of the remedy's DETACH waits for the keys table's lock (claims queue meanwhile). */
export const NET_REMEDY_LOCK_WAIT = '100ms';
/** The pause between two tries, in seconds: the claims queued behind a try go through. */
export const NET_REMEDY_PAUSE_S = 1;
/** How long the remedy keeps trying before it gives up (a backup still running). */
export const NET_REMEDY_GIVE_UP = '1 minute';

/**
 * What an operator runs to be rid of a net (a partition up to MAXVALUE or a far date) whose range
 * was all ahead when the start-up check read it. It held no key then, but it starts where the
 * partitions made ahead end, at most `partitionsAhead + 1` partitions ahead (45 minutes by
 * default), and the releases running make no partition past it (it covers what is ahead): once
 * the present reaches its start, every new key lands in it. A bare DETACH and DROP TABLE, run
 * then, drops keys claimed meanwhile, and each retry runs its handler again (adversary 113).
 *
 * So the statements decide when they run, not when they are printed: one transaction detaches
 * the net (the table's lock waits for the claims writing to it, so every key it holds is seen),
 * drops it if it holds no key, and else attaches it again with an end just past its last key
 * (or now), its keys kept where a retry finds them, and it expires with the others. Then, with
 * the app's layout, it makes the partitions ahead from that end, owned by the keys table's owner
 * as the library's are (the expiry drops them as the app): a running release still believes the
 * net covers all time to come and makes none itself. Never past the net's old end, where an
 * operator's next partition may start. Bounds go through `%L` text, so the transaction pins the
 * settings that text follows, as the partition functions do (adversary 108).
 *
 * The DETACH takes the keys table's ACCESS EXCLUSIVE lock, and every claim queues behind its
 * request. pg_dump, or any long read of the keys table, holds ACCESS SHARE for minutes: a DETACH
 * waiting on it with no bound stalls every claim for as long (adversary 114). So each try waits
 * at most `NET_REMEDY_LOCK_WAIT` for the lock, then lets the claims through for
 * `NET_REMEDY_PAUSE_S` before the next; past `NET_REMEDY_GIVE_UP` it fails, having changed
 * nothing, and says to run it again (not during a backup).
 *
 * `partition` is named with its schema, quoted as SQL takes it; `keysSchema`, the keys table's
 * schema, is the transaction's search path (see `defaultPartitionRemedy`).
 */
export function netAheadRemedy(
  partition: string,
  keysSchema?: string,
  layout?: AheadLayout,
): string {
  // The name inside a quoted literal of the DO block (a quoted identifier may hold a quote).
  const inLiteral = partition.replace(/'/g, "''");
  const makeAhead = layout
    ? `PERFORM idempotency_keys_create_partitions(${layout.partitionMs}, ` +
      `${layout.partitionsAhead}); ` +
      'FOR part IN SELECT p.partition::text FROM idempotency_key_partitions() p ' +
      "WHERE p.from_at >= hi AND p.from_at < coalesce(top, 'infinity') LOOP " +
      "EXECUTE format('ALTER TABLE %s OWNER TO %I', part, (SELECT pg_get_userbyid(relowner) " +
      "FROM pg_class WHERE oid = 'idempotency_keys'::regclass)); END LOOP; "
    : '';
  return [
    'BEGIN',
    `SET LOCAL lock_timeout = '${NET_REMEDY_LOCK_WAIT}'`,
    ...(keysSchema ? [`SET LOCAL search_path = ${sqlName(keysSchema)}`] : []),
    "SET LOCAL datestyle = 'ISO, YMD'",
    "SET LOCAL timezone = 'UTC'",
    'DO $remedy$ DECLARE lo timestamptz; top timestamptz; hi timestamptz; part text; ' +
      `until timestamptz := clock_timestamp() + interval '${NET_REMEDY_GIVE_UP}'; BEGIN ` +
      'SELECT p.from_at, p.to_at INTO lo, top FROM idempotency_key_partitions() p ' +
      `WHERE p.partition = '${inLiteral}'::regclass; ` +
      // Each try's lock wait bounded (lock_timeout), the claims let through between tries.
      `LOOP BEGIN ALTER TABLE idempotency_keys DETACH PARTITION ${partition}; EXIT; ` +
      'EXCEPTION WHEN lock_not_available THEN IF clock_timestamp() > until THEN ' +
      "RAISE EXCEPTION 'idempotency_keys stayed locked (a backup or a long read of it?); " +
      "nothing was changed: run this again once it ends'; END IF; " +
      `PERFORM pg_sleep(${NET_REMEDY_PAUSE_S}); END; END LOOP; ` +
      `SELECT max(placed_at) INTO hi FROM ${partition}; ` +
      `IF hi IS NULL THEN DROP TABLE ${partition}; ELSE ` +
      // least() passes over a NULL: a net up to MAXVALUE has no old end to stay below.
      "hi := least(greatest(hi + interval '1 millisecond', clock_timestamp()), top); " +
      "EXECUTE format('ALTER TABLE idempotency_keys ATTACH PARTITION %s FOR VALUES FROM (%L) " +
      `TO (%L)', '${inLiteral}', lo, hi); ` +
      makeAhead +
      'END IF; END $remedy$',
    'COMMIT',
  ].join('; ');
}
