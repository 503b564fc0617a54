/**
 * Adversary 108 (pool): a DEFAULT partition an operator adds to the partitioned keys table (the
 * usual safety net of a partitioned table: "no row is ever refused for want of a partition")
 * is read as a partition from MINVALUE to MAXVALUE: the library then makes no partition ahead
 * any more, every key from then on lands in the default one, and the expiry never drops it:
 * finished keys past the retention stay for ever (the table grows without bound, and a key
 * reused long after still replays its old answer).
 *
 * User code (an operator's, ordinary PostgreSQL):
 *   CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT;
 *   IdempotencyModule.forRoot({ ..., partitionedExpiry: { partitionMs, retentionMs } })
 *
 * Code path: migrations/1764461600000-PartitionIdempotencyKeys.ts `idempotency_key_partitions()`
 * (`pg_get_expr` gives `DEFAULT`; neither `FROM (…)` nor `TO (…)` matches: from_at and to_at
 * NULL, i.e. MINVALUE and MAXVALUE), `idempotency_keys_create_partitions` (the default "covers"
 * now with no end: returns 'infinity', creates nothing), lib/claim/partitioned/
 * partition-schedule.ts `expirySteps` (a partition ending at MAXVALUE is never touched).
 * Nothing at start-up (lib/schema/schema-check.ts) says a default partition is not supported.
 *
 * Docs quote: docs/reference/options.md `partitionedExpiry`: "keys in a table partitioned by
 * time, expired by dropping whole partitions"; the brief: a misconfiguration fails at start-up
 * with what to do.
 *
 * Severity: medium (retention not kept, storage grows without bound; no start-up refusal).
 *
 * Fails now: (un-skipped) the key claimed after the partitions ahead ran out is in
 * `idempotency_keys_default`, and still there after a purge past its retention; every purge
 * rejects with `error: cannot detach partitions concurrently when a default partition exists`
 * (so even the time partitions made before it are never dropped).
 *
 * Controls: the same story without the default partition: the key is in a partition of its
 * time, and is gone after the purge.
 *
 * Suggested fix: have `idempotency_key_partitions()` leave the default partition out (`WHERE
 * NOT pg_get_expr(…) = 'DEFAULT'`, or `relpartbound`'s `is_default`) so partitions ahead are made
 * and expired as without it; or refuse a default partition at start-up, saying to drop it.
 *
 * Fixed (session of 2026-12-07): both. `idempotency_key_partitions()` leaves a DEFAULT
 * partition out (migrations/partition-functions.ts, via PinPartitionFunctions1764461800000), so
 * partitions are made ahead and expired as without it; the purge detaches under the table's
 * lock, not CONCURRENTLY, while one exists (lib/claim/partitioned/partition-schedule.ts
 * `detachMode`); and the start-up check refuses one, saying to detach and drop it
 * (lib/schema/schema-check.ts `defaultPartitionProblem`).
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

async function fixtureOf(label: string, withDefault: boolean): Promise<Fixture> {
  const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  if (withDefault) {
    await database.dataSource.query(
      'CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT',
    );
  }
  const fresh = new DataSource({ type: 'postgres', url: database.url });
  await fresh.initialize();
  const store = new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => fresh, 5000), {
    partitionMs: PARTITION_MS,
    partitionsAhead: 2,
  });
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

/** Keys claimed over several partitions' time, then a purge past the retention of them all. */
async function story(fixture: Fixture) {
  const { database, store } = fixture;
  await finished(fixture, 'first');
  // Past the partitions made ahead of the first claim.
  await sleep(PARTITION_MS * 4);
  await finished(fixture, 'late');
  const partitionOf = async (key: string) =>
    (
      (await database.dataSource.query(
        `SELECT tableoid::regclass::text AS partition FROM idempotency_keys WHERE key = $1`,
        [key],
      )) as { partition: string }[]
    )[0]?.partition;
  const lateIn = await partitionOf('late');
  await sleep(PARTITION_MS + RETENTION_MS + 1200);
  const purge = await store.purgeBatch(RETENTION_MS).then(
    () => 'ok',
    (error: unknown) => String(error),
  );
  return {
    lateInDefault: lateIn === 'idempotency_keys_default',
    purge,
    lateLeft: (await partitionOf('late')) !== undefined,
  };
}

describePartitioned('adversary 108 pool: a DEFAULT partition stops the partition expiry', () => {
  let plain: Fixture;
  let withDefault: Fixture;

  beforeAll(async () => {
    plain = await fixtureOf('adv108_pool_default_part_plain', false);
    withDefault = await fixtureOf('adv108_pool_default_part_default', true);
  }, 120_000);

  afterAll(async () => {
    for (const f of [plain, withDefault]) {
      await f?.fresh.destroy();
      await f?.database.drop();
    }
  });

  it('control: without a default partition the late key expires with its partition', async () => {
    expect(await story(plain)).toEqual({ lateInDefault: false, purge: 'ok', lateLeft: false });
  }, 60_000);

  it('with a DEFAULT partition the late key expires too', async () => {
    expect(await story(withDefault)).toEqual({
      lateInDefault: false,
      purge: 'ok',
      lateLeft: false,
    });
  }, 60_000);
});
