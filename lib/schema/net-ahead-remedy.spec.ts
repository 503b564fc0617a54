import { netAheadRemedy } from './net-ahead-remedy.js';

describe('netAheadRemedy', () => {
  const layout = { partitionMs: 900_000, partitionsAhead: 2 };
  // What each printed remedy must hold: the decision made when it runs, not when printed.
  it.each<[string, string, string | undefined, typeof layout | undefined, string[], string[]]>([
    [
      'one transaction, in the keys table schema, under pinned settings',
      'idem.rest',
      'idem',
      layout,
      [
        "BEGIN; SET LOCAL lock_timeout = '100ms'; SET LOCAL search_path = idem; ",
        "SET LOCAL datestyle = 'ISO, YMD'; SET LOCAL timezone = 'UTC'; ",
        '; COMMIT',
      ],
      [],
    ],
    [
      'detached first (the lock waits for the claims writing to it), then asked for keys',
      'idem.rest',
      'idem',
      layout,
      [
        'LOOP BEGIN ALTER TABLE idempotency_keys DETACH PARTITION idem.rest; EXIT; EXCEPTION ',
        'END LOOP; SELECT max(placed_at) INTO hi FROM idem.rest; ',
      ],
      [],
    ],
    [
      "each try's lock wait bounded, claims let through between tries, given up in time",
      'idem.rest',
      'idem',
      layout,
      [
        "SET LOCAL lock_timeout = '100ms'",
        'EXCEPTION WHEN lock_not_available THEN IF clock_timestamp() > until THEN RAISE ',
        'run this again',
        'PERFORM pg_sleep(1); END; END LOOP; ',
        "until timestamptz := clock_timestamp() + interval '1 minute'",
      ],
      [],
    ],
    [
      'dropped only while it holds no key',
      'idem.rest',
      'idem',
      layout,
      ['IF hi IS NULL THEN DROP TABLE idem.rest; ELSE '],
      [],
    ],
    [
      'else given an end past its last key, never past its old one, and partitions ahead made',
      'idem.rest',
      'idem',
      layout,
      [
        "least(greatest(hi + interval '1 millisecond', clock_timestamp()), top)",
        "ATTACH PARTITION %s FOR VALUES FROM (%L) TO (%L)', 'idem.rest', lo, hi)",
        'PERFORM idempotency_keys_create_partitions(900000, 2); ',
        'OWNER TO %I',
      ],
      [],
    ],
    [
      'a quoted name with a quote, inside the literals',
      `public."it's"`,
      undefined,
      undefined,
      [`'public."it''s"'::regclass`, `DROP TABLE public."it's"`],
      ['search_path', 'idempotency_keys_create_partitions'],
    ],
  ])('%s', (_name, partition, schema, given, holds, lacks) => {
    const remedy = netAheadRemedy(partition, schema, given);
    for (const part of holds) expect(remedy).toContain(part);
    for (const part of lacks) expect(remedy).not.toContain(part);
  });
});
