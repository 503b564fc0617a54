/**
 * Fixed (session of 2026-12-07): partitions the library did not make (not named for their start
 * and aligned as `idempotency_keys_create_partitions()` makes them: lib/schema/
 * library-partitions.ts `libraryPartitions`) cast no vote: each is judged against the layout
 * starting, 101 times the larger of `partitionMs` and `retentionMs` (lib/schema/
 * partition-ends.ts `partitionEndLimitMs`, `partitionsEndingTooFar`), however many there are.
 *
 * Adversary 113 (readthrough): the start-up check refuses a partition "further ahead than any
 * partition the library makes" (partition-ends.ts `partitionEndLimitMs`: 101 times the largest
 * of `partitionMs`, `retentionMs` and the MEDIAN width of the partitions present), and says "an
 * operator's net or two cannot move it". An operator who pre-creates partitions the usual way
 * (pg_partman style: a year ahead in monthly partitions) adds more nets than the library has
 * partitions: the median becomes a month, the limit 101 months, and all twelve monthly
 * partitions pass. Once the present reaches them the library makes no partition ahead (they
 * cover what is ahead), every key lands in a month-wide partition and stays up to a month past
 * a 2-hour retention; one such partition alone, 12 months ahead, is refused.
 *
 * User code:
 *   IdempotencyModule.forRoot({ retentionMs: 2 * HOUR, partitionedExpiry: true })  (ran)
 *   operator: CREATE TABLE idempotency_keys_m1 .. _m12 PARTITION OF idempotency_keys
 *     FOR VALUES FROM (<end of the last>) TO (<30 days later>)
 *
 * Code path: lib/schema/partition-ends.ts `typicalWidthMs` (the nets' widths counted in the
 * median) -> `partitionEndLimitMs`; lib/schema/schema-check.ts `missingSchema`.
 *
 * Docs quote: lib/schema/partition-ends.ts "the typical width of the partitions present (their
 * median: an operator's net or two cannot move it) stands for the retention too";
 * docs/operations/partitioned-expiry.md: a partition "ending further ahead than any partition
 * the library makes, 101 retentions ... is refused".
 *
 * Severity: medium (the start-up check passes a database the expiry cannot keep to its
 * retention: keys kept up to a partition's width, a month, past a 2-hour retention, storage
 * grows by that much; no second execution, no lost replay).
 *
 * Fails now: (un-skipped) the app starts ('started'): twelve nets, the last ending ~360 days
 * ahead, far past 101 x 2 h = 8.4 days.
 *
 * Controls: the same twelve months as ONE net is refused ("a partition without an end in
 * reach"), on a database otherwise the same.
 *
 * Suggested fix: do not let partitions the library did not make vote: count only widths that
 * fit the library's layout (a library partition is aligned, named idempotency_keys_<time>, and
 * made by idempotency_keys_create_partitions) or only the widths of partitions already past
 * (made before now, so not by a net added ahead); or take the median of the partitions' widths
 * that started before now.
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

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const release = {
  retentionMs: 2 * HOUR,
  partitionedExpiry: { partitionMs: (2 * HOUR) / 8, partitionsAhead: 2 },
};

async function startUp(
  db: MigratedDatabase,
  options: typeof release,
  sources: DataSource[],
): Promise<{ database: IdempotencyDatabase; started: string }> {
  const source = new DataSource({ type: 'postgres', url: db.url });
  await source.initialize();
  sources.push(source);
  const database = new IdempotencyDatabase(() => source, 5000);
  const started = await new IdempotencySchemaCheck(
    database,
    options as unknown as ResolvedIdempotencyOptions,
  )
    .onApplicationBootstrap()
    .then(
      () => 'started',
      (error: unknown) => String(error).slice(0, 400),
    );
  return { database, started };
}

async function claimOnce(
  database: IdempotencyDatabase,
  options: typeof release,
  key: string,
): Promise<void> {
  const store = new PartitionedPostgresClaimStore(database, options.partitionedExpiry);
  const outcome = await store.claim({ tenantId: 't', key }, Buffer.alloc(32, 1), 60_000);
  if (outcome.kind !== 'claimed') throw new Error(`not claimed: ${outcome.kind}`);
}

/** Operator's nets after the last partition: `count` of `days` each. */
async function addNets(db: MigratedDatabase, prefix: string, count: number, days: number) {
  const [{ last }] = (await db.dataSource.query(
    'SELECT max(to_at) AS last FROM idempotency_key_partitions()',
  )) as { last: Date }[];
  let from = last.getTime();
  for (let i = 1; i <= count; i++) {
    const to = from + days * DAY;
    await db.dataSource.query(
      `CREATE TABLE ${prefix}${i} PARTITION OF idempotency_keys FOR VALUES FROM ` +
        `('${new Date(from).toISOString()}') TO ('${new Date(to).toISOString()}')`,
    );
    from = to;
  }
}

describePartitioned('adversary 113 readthrough: many operator nets move the median', () => {
  let months: MigratedDatabase;
  let year: MigratedDatabase;
  const sources: DataSource[] = [];

  beforeAll(async () => {
    for (const label of ['months', 'year']) {
      const db = await createMigratedDatabase(`adv113_rt_nets_${label}`, [
        PartitionIdempotencyKeys1764461600000,
      ]);
      if (label === 'months') months = db;
      else year = db;
      const { database, started } = await startUp(db, release, sources);
      if (started !== 'started') throw new Error(`refused before the nets: ${started}`);
      await claimOnce(database, release, 'k1');
    }
    await addNets(months, 'idempotency_keys_month_', 12, 30);
    await addNets(year, 'idempotency_keys_year_', 1, 360);
  }, 60_000);

  afterAll(async () => {
    for (const source of sources) await source.destroy().catch(() => undefined);
    await months?.drop();
    await year?.drop();
  });

  it('control: one net up to 360 days ahead is refused', async () => {
    const { started } = await startUp(year, release, sources);
    expect(started).toContain('a partition without an end in reach');
  }, 30_000);

  it('twelve monthly nets up to 360 days ahead are refused as the one', async () => {
    const { started } = await startUp(months, release, sources);
    // Observed: 'started'.
    expect(started).toContain('a partition without an end in reach');
  }, 30_000);
});
