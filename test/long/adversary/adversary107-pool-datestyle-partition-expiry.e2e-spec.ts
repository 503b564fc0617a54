/**
 * Adversary 107 (pool): on a database (or role) whose `DateStyle` is not ISO, the partitioned
 * store's expiry never drops a partition: every purge throws inside `expire`, and the keys past
 * the retention stay for ever (the table grows without bound).
 *
 * User code (an operator's, ordinary PostgreSQL; the app unchanged):
 *   ALTER DATABASE app SET DateStyle = 'German';            -- or 'SQL, DMY'
 *   IdempotencyModule.forRoot({ ..., partitionedExpiry: true })  // + its migration
 *
 * Code path: lib/claim/partitioned/partitioned-postgres-claim.store.ts `expire`/`expireOne`:
 * `SELECT now()` and LIST_PARTITIONS' bounds read with `withLibraryTypes`; lib/connection/
 * library-types.ts `asDate` gives back "any other text as it is" for a non-ISO style
 * (`07.12.2026 07:27:01.000646 +0000`), and lib/claim/partitioned/partition-schedule.ts
 * `expirySteps` calls `now.getTime()` on that string: a TypeError, each purge.
 * Nothing at start-up says the setting is unsupported.
 *
 * Docs quote: docs/reference/options.md `partitionedExpiry`: "keys in a table partitioned by
 * time, expired by dropping whole partitions"; the brief's promise: a misconfiguration fails at start-up
 * with what to do.
 *
 * Severity: medium (storage grows without bound and retention is not kept; no wrong answer).
 *
 * Fails now: (un-skipped) the finished key's partition is still there after the purge past its
 * retention, and `purgeBatch` rejects with `TypeError: now.getTime is not a function`.
 *
 * Controls: the same on a database with the default DateStyle: the partition is dropped.
 *
 * Suggested fix: read the clock and the bounds as epoch milliseconds in SQL (`extract(epoch
 * FROM …) * 1000`), or pin `DateStyle = ISO` for the library's own statements (`SET LOCAL` in
 * their round trip, as the search path is), or refuse the setting at start-up with what to do.
 *
 * Fixed (session of 2026-12-07): the library's statements that return a time return it as
 * milliseconds since 1970 in an int8 (lib/connection/epoch-ms.ts `epochMsOf`, read back by
 * `dateOfEpochMs`): the partitioned expiry's bounds and clock (`LIST_PARTITIONS`,
 * `PARTITION_CLOCK`), whatever the session's `DateStyle`; no session setting is changed.
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

async function fixtureOf(label: string, dateStyle?: string): Promise<Fixture> {
  const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  if (dateStyle) {
    const name = new URL(database.url).pathname.slice(1);
    await database.dataSource.query(`ALTER DATABASE "${name}" SET DateStyle = '${dateStyle}'`);
  }
  // Connections made after the setting: as the app's would be.
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
  'adversary 107 pool: a DateStyle other than ISO stops the partition expiry',
  () => {
    let plain: Fixture;
    let german: Fixture;

    beforeAll(async () => {
      plain = await fixtureOf('adv107_pool_ds_part_plain');
      german = await fixtureOf('adv107_pool_ds_part_german', 'German');
    }, 120_000);

    afterAll(async () => {
      for (const f of [plain, german]) {
        await f?.fresh.destroy();
        await f?.database.drop();
      }
    });

    it('control: with the default DateStyle the expired partition is dropped', async () => {
      expect(await expiryStory(plain)).toEqual({
        purge: 'ok',
        partitionLeft: false,
        keyLeft: false,
      });
    }, 60_000);

    it('with DateStyle German the expired partition is dropped too', async () => {
      expect(await expiryStory(german)).toEqual({
        purge: 'ok',
        partitionLeft: false,
        keyLeft: false,
      });
    }, 60_000);
  },
);
