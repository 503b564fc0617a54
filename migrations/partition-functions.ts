/**
 * The partitioned layout's two functions that read and write partition bounds, as
 * `PartitionIdempotencyKeys` makes them and `PinPartitionFunctions` re-makes them (one text for
 * both, so a database gets the same functions whichever order the two ran in).
 *
 * Both go through a timestamp's text: the catalog keeps a bound only as the text of its
 * expression (`pg_get_expr`), and an ATTACH takes one as text. That text follows the session's
 * `DateStyle` and `TimeZone`, which a role or database may set: `07.12.2026 13:30:00 IST` under
 * German and Asia/Kolkata, whose `IST` PostgreSQL reads back as Israel's +02, 3h30 off
 * (adversary 108). So each function runs under fixed settings of its own (`SET` on the
 * function: ISO text with a numeric offset, in UTC), put back when it returns; the caller's
 * session and transaction keep theirs.
 */
export const PINNED_SETTINGS = `SET datestyle = 'ISO, YMD' SET timezone = 'UTC'`;

/**
 * The partitions with their bounds, read from the catalog (`NULL` for MINVALUE / MAXVALUE):
 * the store's expiry and `idempotency_keys_create_partitions` plan from it, and operators may
 * query it. A DEFAULT partition (an operator's) is left out: it has no bounds, and read as one
 * from MINVALUE to MAXVALUE it would "cover" all time, so no partition would be made ahead and
 * none expired (adversary 108); the start-up check refuses it.
 */
export const PARTITIONS_FUNCTION = `
CREATE OR REPLACE FUNCTION idempotency_key_partitions()
RETURNS TABLE (partition regclass, from_at timestamptz, to_at timestamptz, detach_pending boolean)
LANGUAGE sql STABLE ${PINNED_SETTINGS} AS $$
  SELECT c.oid::regclass,
         nullif(substring(b.bound FROM 'FROM \\(''?([^'')]*)''?\\)'), 'MINVALUE')::timestamptz,
         nullif(substring(b.bound FROM 'TO \\(''?([^'')]*)''?\\)'), 'MAXVALUE')::timestamptz,
         i.inhdetachpending
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
  CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
  WHERE i.inhparent = to_regclass('idempotency_keys') AND b.bound <> 'DEFAULT'
  ORDER BY 2 NULLS FIRST
$$`;

/**
 * Creates the partitions that cover the time from now to `ahead` partitions past the current
 * one, aligned to multiples of `width_ms` since the epoch; returns how many milliseconds from
 * now are covered without a gap. Partitions that exist are kept, whatever their width (a width
 * changed in the app's options takes effect from the end of the last one).
 *
 * Each partition is made as a plain table and then attached: `ATTACH PARTITION` locks the
 * partitioned table in SHARE UPDATE EXCLUSIVE mode, which claims (ROW EXCLUSIVE) pass, where
 * `CREATE TABLE ... PARTITION OF` would lock them all out for a moment. Its unique index on
 * `(tenant_id, key)` serves the claim's lookup, and is a backstop: a second row of one key in
 * one partition fails. Its bounds are written with `%L`, a timestamp's text: in UTC, ISO.
 */
export const CREATE_PARTITIONS_FUNCTION = `
CREATE OR REPLACE FUNCTION idempotency_keys_create_partitions(width_ms bigint, ahead int)
RETURNS double precision
LANGUAGE plpgsql ${PINNED_SETTINGS} AS $$
DECLARE
  t timestamptz;
  horizon timestamptz;
  covering_to timestamptz;
  next_at timestamptz;
  name text;
BEGIN
  IF width_ms < 1 OR ahead < 0 THEN
    RAISE EXCEPTION 'idempotency_keys_create_partitions: width_ms must be at least 1, ahead at least 0';
  END IF;
  -- One creator at a time (several instances may run it): two would make the same partition.
  PERFORM pg_advisory_xact_lock(hashtextextended('idempotency_keys_create_partitions', 0));
  t := 'epoch'::timestamptz + interval '1 millisecond'
    * (floor(extract(epoch FROM clock_timestamp()) * 1000 / width_ms) * width_ms);
  horizon := t + interval '1 millisecond' * (width_ms * (ahead + 1));
  WHILE t < horizon LOOP
    SELECT p.to_at INTO covering_to FROM idempotency_key_partitions() p
    WHERE NOT p.detach_pending AND (p.from_at IS NULL OR p.from_at <= t)
      AND (p.to_at IS NULL OR p.to_at > t);
    IF FOUND THEN
      IF covering_to IS NULL THEN
        RETURN 'infinity';
      END IF;
      t := covering_to;
      CONTINUE;
    END IF;
    next_at := 'epoch'::timestamptz + interval '1 millisecond'
      * ((floor(extract(epoch FROM t) * 1000 / width_ms) + 1) * width_ms);
    SELECT least(next_at, min(p.from_at)) INTO next_at FROM idempotency_key_partitions() p
    WHERE p.from_at > t;
    name := 'idempotency_keys_' || to_char(t AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISSMS');
    EXECUTE format(
      'CREATE TABLE %I (LIKE idempotency_keys INCLUDING DEFAULTS INCLUDING CONSTRAINTS) '
      'WITH (fillfactor = 70)', name);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (tenant_id, key)', name || '_key', name);
    EXECUTE format('ALTER TABLE idempotency_keys ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
      name, t, next_at);
    t := next_at;
  END LOOP;
  RETURN extract(epoch FROM t - clock_timestamp()) * 1000;
END
$$`;
