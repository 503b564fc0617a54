/**
 * Adversary 108 (pool): on a database whose `TimeZone` prints an abbreviation PostgreSQL reads
 * back as another zone (India's `Asia/Kolkata` prints `IST`, which the default
 * `timezone_abbreviations` read as Israel's +02; China's `Asia/Shanghai` prints `CST`, read as
 * US Central, 14 h off; Ireland's summer `IST`), under any `DateStyle` but ISO (the round-107
 * fix says the others change nothing now: `German`, `SQL`, `Postgres`), the partitioned
 * layout's bounds are misread by hours: no partition covers now, and every claim fails with
 * "no partition of relation found for row", answered as the library's 503 "unavailable …
 * Retry later", on every request, for ever.
 *
 * User code (an operator's, ordinary PostgreSQL; the app unchanged):
 *   ALTER DATABASE app SET DateStyle = 'German';
 *   ALTER DATABASE app SET TimeZone = 'Asia/Kolkata';
 *   IdempotencyModule.forRoot({ ..., partitionedExpiry: true })  // + its migration
 *
 * Code path: migrations/1764461600000-PartitionIdempotencyKeys.ts `idempotency_key_partitions()`
 * reads each bound back from `pg_get_expr(relpartbound)`'s text (`'07.12.2026 13:30:00 IST'`,
 * printed in the session's DateStyle and TimeZone) with `::timestamptz`; `IST` is read as +02,
 * so the bound comes back 3h30 late. lib/connection/epoch-ms.ts `epochMsOf` then turns the
 * wrong time into exact milliseconds (LIST_PARTITIONS), lib/claim/partitioned/
 * partition-schedule.ts `expirySteps` judges the partitions by them (and
 * `idempotency_keys_create_partitions` finds "what covers now" by the same function, and attaches
 * new partitions with `format('%L', t)`, the same text round trip).
 *
 * Docs quote: docs/guides/data-layers.md: "The times it reads (the partitioned expiry's clock and
 * partition bounds, …) come as milliseconds since 1970, never as a timestamp's text, so a
 * database or role with another `DateStyle` … changes nothing either". The bounds still make a
 * trip through a timestamp's text, inside the SQL function.
 *
 * Severity: medium by the rubric (a wrong status, nothing written twice), but the app is down:
 * the module starts, then every idempotent request is a 503 "Retry later" for a permanent
 * cause (the brief's "a permanent error is never answered as retry later").
 *
 * Fails now: (un-skipped) `store.claim` rejects with `IdempotencyStoreUnavailableError: The
 * idempotency store is unavailable; nothing was executed. Retry later.`, cause `error: no
 * partition of relation "idempotency_keys" found for row`.
 *
 * Controls: the same with DateStyle German and TimeZone UTC: the key is claimed, and the expired
 * partition is dropped.
 *
 * Suggested fix: have `idempotency_key_partitions()` print and parse the bounds under fixed
 * settings (`SET datestyle = ISO` and `SET timezone = UTC` as function-level settings:
 * `CREATE FUNCTION … SET datestyle = 'ISO, YMD' SET timezone = 'UTC'`), and the same for
 * `idempotency_keys_create_partitions` (its `%L` of a timestamptz); a new migration re-creates
 * both.
 *
 * Fixed (session of 2026-12-07): both functions carry `SET datestyle = 'ISO, YMD' SET timezone
 * = 'UTC'` (migrations/partition-functions.ts, made so by PartitionIdempotencyKeys and re-made
 * by the new PinPartitionFunctions1764461800000 in IDEMPOTENCY_MIGRATIONS); the start-up check
 * refuses the earlier, unpinned functions, naming that migration (lib/schema/schema-check.ts
 * `hasPinnedSettings`).
 */
import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { IdempotencyDatabase } from '../../../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../../../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { describePartitioned } from '../../support/postgres-version.js';

if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

const PARTITION_MS = 1000;
const RETENTION_MS = 1500;
const fingerprint = Buffer.alloc(32, 9);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Fixture {
  database: MigratedDatabase;
  fresh: DataSource;
  store: PartitionedPostgresClaimStore;
}

async function fixtureOf(label: string, settings: Record<string, string>): Promise<Fixture> {
  const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  const name = new URL(database.url).pathname.slice(1);
  for (const [setting, value] of Object.entries(settings)) {
    await database.dataSource.query(`ALTER DATABASE "${name}" SET ${setting} = '${value}'`);
  }
  // Connections made after the settings: as the app's would be.
  const fresh = new DataSource({ type: 'postgres', url: database.url });
  await fresh.initialize();
  const store = new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => fresh, 5000), {
    partitionMs: PARTITION_MS,
    partitionsAhead: 2,
  });
  return { database, fresh, store };
}

/** A finished key, then a purge once its partition is past the retention: is it gone? */
async function expiryStory({ database, store }: Fixture) {
  const outcome = await store.claim({ tenantId: 'r', key: 'done' }, fingerprint, 60_000);
  if (outcome.kind !== 'claimed') throw new Error('not claimed');
  await store.finish(outcome.claim, {
    status: 201,
    headers: { 'content-type': 'application/json' },
    body: Buffer.from('"ok"'),
  });
  const where = async () =>
    (
      (await database.dataSource.query(
        `SELECT tableoid::regclass::text AS partition FROM idempotency_keys WHERE key = 'done'`,
      )) as { partition: string }[]
    )[0]?.partition;
  const partition = await where();
  await sleep(PARTITION_MS + RETENTION_MS + 1200);
  const purge = await store.purgeBatch(RETENTION_MS).then(
    () => 'ok',
    (error: unknown) => String(error),
  );
  const left = (await database.dataSource.query(
    `SELECT count(*)::int AS n FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE c.relname = $1`,
    [partition.replace(/"/g, '')],
  )) as { n: number }[];
  return { purge, partitionLeft: left[0].n > 0, keyLeft: (await where()) !== undefined };
}

describePartitioned(
  'adversary 108 pool: a TimeZone printed as an ambiguous abbreviation misreads the partition bounds',
  () => {
    let germanUtc: Fixture;
    let germanKolkata: Fixture;

    beforeAll(async () => {
      germanUtc = await fixtureOf('adv108_pool_tz_utc', { DateStyle: 'German', TimeZone: 'UTC' });
      germanKolkata = await fixtureOf('adv108_pool_tz_kolkata', {
        DateStyle: 'German',
        TimeZone: 'Asia/Kolkata',
      });
    }, 120_000);

    afterAll(async () => {
      for (const f of [germanUtc, germanKolkata]) {
        await f?.fresh.destroy();
        await f?.database.drop();
      }
    });

    it('control: DateStyle German, TimeZone UTC: the expired partition is dropped', async () => {
      expect(await expiryStory(germanUtc)).toEqual({
        purge: 'ok',
        partitionLeft: false,
        keyLeft: false,
      });
    }, 60_000);

    it('with DateStyle German and TimeZone Asia/Kolkata a key is claimed, its partition expired', async () => {
      expect(await expiryStory(germanKolkata)).toEqual({
        purge: 'ok',
        partitionLeft: false,
        keyLeft: false,
      });
    }, 60_000);
  },
);
