/**
 * Fixed (session of 2026-12-07, third): refused at start-up, as a DEFAULT partition is
 * (lib/schema/schema-check.ts `unboundedPartitionProblem`, from the catalog query's
 * `unboundedPartitions`: MAXVALUE or 'infinity'), with the remedy that keeps its keys: detach
 * it and attach it again `TO (now())` (or drop it if empty). The store itself still does not
 * split such a partition; the test now shows the refusal, then follows the remedy as written
 * and sees the late key kept, then expired with its partition. The doctor fails it too.
 *
 * Adversary 109 (pool): a partition an operator adds up to MAXVALUE (the range-partitioned
 * table's other usual safety net, "FROM (<some time>) TO (MAXVALUE)", where adversary 108's
 * was a DEFAULT partition) stops the partitioned expiry for good once the clock reaches it:
 * `idempotency_keys_create_partitions()` finds it covering now with no end (`covering_to IS
 * NULL`: returns 'infinity') and makes no partition ahead any more, every key claimed from
 * then on lands in it, and the purge never drops it (`expirySteps` skips a partition without
 * an end). Finished keys past the retention stay for ever (the table grows without bound, and
 * a key reused long after still replays its old answer). The start-up check refuses a DEFAULT
 * partition, saying why, but says nothing of this one.
 *
 * User code (an operator's, ordinary PostgreSQL):
 *   CREATE TABLE idempotency_keys_rest PARTITION OF idempotency_keys
 *     FOR VALUES FROM ('<end of the last partition>') TO (MAXVALUE);
 *   IdempotencyModule.forRoot({ ..., partitionedExpiry: { partitionMs, ... } })
 *
 * Code path: migrations/partition-functions.ts CREATE_PARTITIONS_FUNCTION (`IF covering_to IS
 * NULL THEN RETURN 'infinity'`), lib/claim/partitioned/partition-schedule.ts `expirySteps`
 * (`toAt !== null && ...`), lib/schema/schema-check.ts (`defaultPartitionProblem` only).
 *
 * Docs quote: docs/reference/options.md `partitionedExpiry`: "keys in a table partitioned by
 * time, expired by dropping whole partitions"; docs/operations/partitioned-expiry.md "No
 * DEFAULT partition. The library makes the partitions ahead itself ..." (a MAXVALUE one is the
 * same net, not mentioned); the brief: a misconfiguration fails at start-up with what to do.
 *
 * Severity: medium (retention not kept, storage grows without bound, no start-up refusal), as
 * adversary 108's DEFAULT partition.
 *
 * Fails now: (un-skipped) the late key is in `idempotency_keys_rest`, and still there after a
 * purge past its retention (the purge itself succeeds).
 *
 * Controls: the same story without the operator's partition: the key is in a partition of its
 * time, and is gone after the purge.
 *
 * Suggested fix: refuse at start-up a partition without an upper bound (MAXVALUE, or 'infinity',
 * see adversary109-pool-infinity-partition-bound), saying to detach it (as for a DEFAULT one);
 * or have the purge split it (detach, make the time partitions, move its rows) / expire its
 * old rows by DELETE; and name it in the docs' "No DEFAULT partition" section.
 */
import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { IdempotencyDatabase } from '../../../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../../../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { IdempotencySchemaCheck } from '../../../lib/idempotency-schema.check.js';
import { unboundedPartitionProblem } from '../../../lib/schema/schema-check.js';
import { type ResolvedIdempotencyOptions } from '../../../lib/shapes/idempotency-options.interface.js';
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

async function fixtureOf(label: string, withRest: boolean): Promise<Fixture> {
  const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  const fresh = new DataSource({ type: 'postgres', url: database.url });
  await fresh.initialize();
  const store = new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => fresh, 5000), {
    partitionMs: PARTITION_MS,
    partitionsAhead: 2,
  });
  // The partitions ahead of a first claim are made; the operator's net starts where they end.
  await finished({ database, fresh, store }, 'first');
  if (withRest) {
    await database.dataSource.query(`DO $$ BEGIN
      EXECUTE format('CREATE TABLE idempotency_keys_rest PARTITION OF idempotency_keys '
        'FOR VALUES FROM (%L) TO (MAXVALUE)',
        (SELECT max(to_at) FROM idempotency_key_partitions()));
    END $$`);
  }
  return { database, fresh, store };
}

async function finished({ store }: Fixture, key: string): Promise<void> {
  const outcome = await store.claim({ tenantId: 'r', key }, fingerprint, 60_000);
  if (outcome.kind !== 'claimed') throw new Error(`${key} not claimed: ${outcome.kind}`);
  await store.finish(outcome.claim, {
    status: 201,
    headers: { 'content-type': 'application/json' },
    body: Buffer.from('"ok"'),
  });
}

/** The partition a key is in (undefined: none, expired). */
async function partitionOf(database: MigratedDatabase, key: string): Promise<string | undefined> {
  const rows = (await database.dataSource.query(
    `SELECT tableoid::regclass::text AS partition FROM idempotency_keys WHERE key = $1`,
    [key],
  )) as { partition: string }[];
  return rows[0]?.partition;
}

/** The start-up check of an app with partitionedExpiry on this database. */
function startUpCheck(fresh: DataSource): Promise<void> {
  const options = {
    partitionedExpiry: { partitionMs: PARTITION_MS, partitionsAhead: 2 },
  } as unknown as ResolvedIdempotencyOptions;
  return new IdempotencySchemaCheck(
    new IdempotencyDatabase(() => fresh, 5000),
    options,
  ).onApplicationBootstrap();
}

/** A key claimed past the partitions made ahead, then a purge past its retention. */
async function story(fixture: Fixture) {
  const { database, store } = fixture;
  await sleep(PARTITION_MS * 4);
  await finished(fixture, 'late');
  const lateIn = await partitionOf(database, 'late');
  await sleep(PARTITION_MS + RETENTION_MS + 1200);
  const purge = await store.purgeBatch(RETENTION_MS).then(
    () => 'ok',
    (error: unknown) => String(error),
  );
  return {
    lateInRest: lateIn === 'idempotency_keys_rest',
    purge,
    lateLeft: (await partitionOf(database, 'late')) !== undefined,
  };
}

describePartitioned('adversary 109 pool: a partition up to MAXVALUE stops the expiry', () => {
  let plain: Fixture;
  let withRest: Fixture;

  beforeAll(async () => {
    plain = await fixtureOf('adv109_pool_maxvalue_plain', false);
    withRest = await fixtureOf('adv109_pool_maxvalue_rest', true);
  }, 120_000);

  afterAll(async () => {
    for (const f of [plain, withRest]) {
      await f?.fresh.destroy();
      await f?.database.drop();
    }
  });

  it('control: without the operator partition the late key expires with its partition', async () => {
    expect(await story(plain)).toEqual({ lateInRest: false, purge: 'ok', lateLeft: false });
  }, 60_000);

  it('with a partition up to MAXVALUE the app is refused at start-up; given an end as the refusal says, the late key expires too', async () => {
    const { database, fresh, store } = withRest;
    await sleep(PARTITION_MS * 4);
    await finished(withRest, 'late');
    // As before the fix: past the partitions made ahead, the key lands in the operator's.
    expect(await partitionOf(database, 'late')).toBe('idempotency_keys_rest');
    // Refused at start-up (was: started), naming the partition and what to do.
    await expect(startUpCheck(fresh)).rejects.toThrow(
      unboundedPartitionProblem('public.idempotency_keys_rest', 'public'),
    );
    // The refusal's remedy, as written: detached, attached again up to now().
    await database.dataSource.query(`DO $$ DECLARE start timestamptz; BEGIN
      SELECT from_at INTO start FROM idempotency_key_partitions()
        WHERE partition = 'idempotency_keys_rest'::regclass;
      ALTER TABLE idempotency_keys DETACH PARTITION idempotency_keys_rest;
      EXECUTE format('ALTER TABLE idempotency_keys ATTACH PARTITION idempotency_keys_rest '
        'FOR VALUES FROM (%L) TO (now())', start);
    END $$`);
    await expect(startUpCheck(fresh)).resolves.toBeUndefined();
    expect(await partitionOf(database, 'late')).toBe('idempotency_keys_rest');
    await sleep(PARTITION_MS + RETENTION_MS + 1200);
    await store.purgeBatch(RETENTION_MS);
    expect(await partitionOf(database, 'late')).toBeUndefined();
  }, 60_000);
});
