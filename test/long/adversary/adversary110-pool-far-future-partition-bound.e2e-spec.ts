/**
 * Fixed (session of 2026-12-07, fourth): the start-up check judges each partition's end, read
 * through `idempotency_key_partitions()`, not its text: one ending further ahead than any
 * partition the library makes (`partitionEndLimitMs`, lib/schema/partition-ends.ts) is refused
 * as a partition without an end, with the remedy for its case.
 *
 * Adversary 110 (pool): the start-up check refuses a partition "without an end" only when its
 * bound's text reads `TO (MAXVALUE)` or `TO ('infinity')` (SCHEMA_CATALOG_QUERY's
 * `unboundedPartitions`, a LIKE on `pg_get_expr`). The other everyday way of writing an
 * open-ended range partition, a far date (`TO ('9999-12-31')`, `TO ('3000-01-01')`), is let
 * through, and it breaks the partitioned expiry exactly as MAXVALUE does (adversary 109): once
 * the present reaches it, `idempotency_keys_create_partitions()` finds it covering now and
 * every time ahead (`t := covering_to`, past the horizon), makes no partition ahead any more,
 * every key lands in it, and the purge never drops it (`expirySteps`: its end is never past
 * the retention). Finished keys stay for ever; a key reused years later replays its old answer.
 *
 * User code (an operator's, ordinary PostgreSQL, the net the docs' MAXVALUE paragraph warns of
 * written with a date):
 *   CREATE TABLE idempotency_keys_rest PARTITION OF idempotency_keys
 *     FOR VALUES FROM ('<end of the last partition>') TO ('9999-12-31');
 *   IdempotencyModule.forRoot({ ..., partitionedExpiry: { partitionMs, ... } })
 *
 * Code path: lib/schema/schema-check.ts SCHEMA_CATALOG_QUERY (`b.bound LIKE '% TO (MAXVALUE)'
 * OR b.bound LIKE '% TO (''infinity'')'`), `unboundedPartitionProblem`; migrations/
 * partition-functions.ts CREATE_PARTITIONS_FUNCTION; lib/claim/partitioned/partition-schedule.ts
 * `expirySteps`; lib/cli/doctor-checks.ts `checkPartitions` (null `to_at` only).
 *
 * Docs quote: docs/operations/partitioned-expiry.md "No partition without an end. The other
 * usual net, a partition `FROM (...) TO (MAXVALUE)` ... fails the same way: once the present
 * reaches it no partition is made ahead, every key lands in it, and the expiry never drops it
 * ... The app refuses to start with one"; the brief: every misconfiguration fails at start-up.
 *
 * Severity: medium (as adversary 109's MAXVALUE: retention not kept, storage grows without
 * bound, a broken app started).
 *
 * Fails now: (un-skipped) the start-up check passes with the partition up to 9999-12-31, the
 * late key lands in `idempotency_keys_rest`, and it is still there after a purge past its
 * retention.
 *
 * Controls: the same story without the operator's partition: the late key is in a partition of
 * its time and is gone after the purge; with `TO (MAXVALUE)` the check refuses (as fixed in 109).
 *
 * Suggested fix: judge the bound, not its text: refuse a partition whose end lies further
 * ahead than `partitionsAhead + 1` partitions (or than a retention) from now, in the check and
 * the doctor, with the same remedy (detach, attach again `TO (now())`); or have the partition
 * function cap `t := covering_to` at the horizon and the purge split such a partition.
 */
import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { IdempotencyDatabase } from '../../../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../../../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { IdempotencySchemaCheck } from '../../../lib/idempotency-schema.check.js';
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

/** `rest`: the operator's partition's end (SQL), or none. */
async function fixtureOf(label: string, rest?: string): Promise<Fixture> {
  const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  const fresh = new DataSource({ type: 'postgres', url: database.url });
  await fresh.initialize();
  const store = new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => fresh, 5000), {
    partitionMs: PARTITION_MS,
    partitionsAhead: 2,
  });
  await finished({ database, fresh, store }, 'first');
  if (rest) {
    await database.dataSource.query(`DO $$ BEGIN
      EXECUTE format('CREATE TABLE idempotency_keys_rest PARTITION OF idempotency_keys '
        'FOR VALUES FROM (%L) TO (${rest.replace(/'/g, "''")})',
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

async function partitionOf(database: MigratedDatabase, key: string): Promise<string | undefined> {
  const rows = (await database.dataSource.query(
    `SELECT tableoid::regclass::text AS partition FROM idempotency_keys WHERE key = $1`,
    [key],
  )) as { partition: string }[];
  return rows[0]?.partition;
}

/** Whether the start-up check of an app with partitionedExpiry refuses this database. */
function refused(fresh: DataSource): Promise<boolean> {
  const options = {
    partitionedExpiry: { partitionMs: PARTITION_MS, partitionsAhead: 2 },
  } as unknown as ResolvedIdempotencyOptions;
  return new IdempotencySchemaCheck(new IdempotencyDatabase(() => fresh, 5000), options)
    .onApplicationBootstrap()
    .then(
      () => false,
      () => true,
    );
}

/** Refused at start-up, or a late key that expires with its partition. */
async function story(fixture: Fixture) {
  const { database, fresh, store } = fixture;
  const refusedAtStart = await refused(fresh);
  await sleep(PARTITION_MS * 4);
  await finished(fixture, 'late');
  const lateIn = await partitionOf(database, 'late');
  await sleep(PARTITION_MS + RETENTION_MS + 1200);
  await store.purgeBatch(RETENTION_MS);
  return {
    refusedAtStart,
    lateInRest: lateIn === 'idempotency_keys_rest',
    lateLeft: (await partitionOf(database, 'late')) !== undefined,
  };
}

describePartitioned('adversary 110 pool: a partition up to a far date stops the expiry', () => {
  let plain: Fixture;
  let maxvalue: Fixture;
  let farDate: Fixture;

  beforeAll(async () => {
    plain = await fixtureOf('adv110_pool_far_plain');
    maxvalue = await fixtureOf('adv110_pool_far_maxvalue', 'MAXVALUE');
    farDate = await fixtureOf('adv110_pool_far_date', "'9999-12-31'");
  }, 120_000);

  afterAll(async () => {
    for (const f of [plain, maxvalue, farDate]) {
      await f?.fresh.destroy();
      await f?.database.drop();
    }
  });

  it('control: without the operator partition the late key expires; up to MAXVALUE it is refused', async () => {
    expect(await story(plain)).toEqual({
      refusedAtStart: false,
      lateInRest: false,
      lateLeft: false,
    });
    expect(await refused(maxvalue.fresh)).toBe(true);
  }, 60_000);

  it('a partition up to 9999-12-31 is refused at start-up, or its keys expire', async () => {
    const outcome = await story(farDate);
    // Observed: { refusedAtStart: false, lateInRest: true, lateLeft: true }.
    expect(outcome.refusedAtStart || !outcome.lateLeft).toBe(true);
  }, 60_000);
});
