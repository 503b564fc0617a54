import { sqlName } from './sql-name.js';

/**
 * What an operator runs to be rid of a DEFAULT partition of the partitioned keys table without
 * losing the keys in it. Those keys are answered requests: on a database an earlier release ran
 * on, every key claimed since its partitions ahead ran out sits there (adversary 108), and
 * dropping them makes each retry run its handler again (adversary 109).
 *
 * The statements detach the partition, then give its rows range partitions of their own, one
 * per gap between the existing partitions that its rows fall in (a DEFAULT partition only holds
 * rows no range partition covered, so its rows lie in those gaps), move them there and drop the
 * emptied table. The new partitions are ordinary ones, made as the library makes its own (the
 * unique `(tenant_id, key)` index the claim's lookup uses, owned by the keys table's owner, so
 * that the app's expiry may drop them whoever ran this): the expiry drops each once its keys
 * are past retention. One transaction: a failure leaves everything as it was. Bounds go through
 * `%L` text, so the transaction pins the settings that text follows (as the partition functions
 * do: `DateStyle` and `TimeZone`, adversary 108).
 *
 * `partition` is the partition's name with its schema, quoted as SQL takes them: an operator's
 * session need not have the app's search path, and a partition may sit in a schema of its own
 * (adversary 109). `keysSchema`, the keys table's schema, is the transaction's search path, so
 * that the keys table, its partition function and the partitions made land where the app's
 * statements find them (each partition in the keys table's schema, as the library makes them).
 */
export function defaultPartitionRemedy(partition: string, keysSchema?: string): string {
  // The name inside a quoted literal of the DO block (a quoted identifier may hold a quote).
  const inLiteral = partition.replace(/'/g, "''");
  return [
    'BEGIN',
    ...(keysSchema ? [`SET LOCAL search_path = ${sqlName(keysSchema)}`] : []),
    "SET LOCAL datestyle = 'ISO, YMD'",
    "SET LOCAL timezone = 'UTC'",
    `ALTER TABLE idempotency_keys DETACH PARTITION ${partition}`,
    'DO $remedy$ DECLARE lo timestamptz; hi timestamptz; part text; cols text; BEGIN ' +
      // By name: the detached table's columns may lie in another order than the table's.
      "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols FROM " +
      "pg_attribute WHERE attrelid = 'idempotency_keys'::regclass AND attnum > 0 AND NOT " +
      'attisdropped; LOOP ' +
      `SELECT min(placed_at) INTO lo FROM ${partition}; EXIT WHEN lo IS NULL; ` +
      `SELECT least(max(d.placed_at) + interval '1 millisecond', ` +
      `(SELECT min(p.from_at) FROM idempotency_key_partitions() p WHERE p.from_at > lo)) ` +
      `INTO hi FROM ${partition} d; ` +
      "part := 'idempotency_keys_' || to_char(lo, 'YYYYMMDD\"t\"HH24MISSUS') || '_kept'; " +
      "EXECUTE format('CREATE TABLE %I (LIKE idempotency_keys INCLUDING DEFAULTS " +
      "INCLUDING CONSTRAINTS)', part); " +
      // As the library makes its partitions: the claim's lookup index, and the table's owner
      // (whoever runs this, the expiry drops it as the app: adversary 110).
      "EXECUTE format('CREATE UNIQUE INDEX %I ON %I (tenant_id, key)', part || '_key', part); " +
      "EXECUTE format('ALTER TABLE %I OWNER TO %I', part, (SELECT pg_get_userbyid(relowner) " +
      "FROM pg_class WHERE oid = 'idempotency_keys'::regclass)); " +
      "EXECUTE format('ALTER TABLE idempotency_keys ATTACH PARTITION %I FOR VALUES FROM (%L) " +
      "TO (%L)', part, lo, hi); " +
      `EXECUTE format('WITH moved AS (DELETE FROM ${inLiteral} WHERE placed_at >= %L AND ` +
      "placed_at < %L RETURNING *) INSERT INTO idempotency_keys (%s) SELECT %s FROM moved', " +
      'lo, hi, cols, cols); ' +
      `END LOOP; DROP TABLE ${partition}; END $remedy$`,
    'COMMIT',
  ].join('; ');
}
