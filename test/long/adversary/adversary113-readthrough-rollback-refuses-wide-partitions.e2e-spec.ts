/**
 * Fixed (session of 2026-12-07): the start-up check tells the library's own partitions from an
 * operator's by their name and alignment as `idempotency_keys_create_partitions()` makes them
 * (lib/schema/library-partitions.ts `libraryPartitions`); each of the library's may end up to
 * 101 times its own width ahead, whatever the others are, and only the others are judged
 * against the layout starting (lib/schema/partition-ends.ts `partitionsEndingTooFar`). No
 * median: the daily partitions release 2 made pass the rollback's check by their own width.
 *
 * Adversary 113 (readthrough): the start-up check's partition-end limit counts the median width
 * of the partitions present (partition-ends.ts `typicalWidthMs`, the fix of adversary 111) so
 * that partitions a previous release made ahead under a longer retention "must not stop the app
 * from starting". The median only speaks for the retention of the release that made the MOST
 * partitions. A deploy that widens the layout (retention 2 h, 15-minute partitions, 20 ahead, to
 * retention 7 days, daily partitions, 14 ahead) and is rolled back leaves 21 narrow partitions
 * and 15 daily ones: the median is 15 minutes, the limit 101 x 2 h = 8.4 days, and the daily
 * partitions the library itself made (up to 15 days ahead) are refused as "an operator's net":
 * the rolled-back release does not start.
 *
 * User code:
 *   release 1: IdempotencyModule.forRoot({ retentionMs: 2 * HOUR,
 *     partitionedExpiry: { partitionMs: 15 * MINUTE, partitionsAhead: 20 } })   (ran)
 *   release 2: IdempotencyModule.forRoot({ retentionMs: 7 * DAY,
 *     partitionedExpiry: { partitionMs: DAY, partitionsAhead: 14 } })           (ran)
 *   rollback to release 1.
 *
 * Code path: lib/idempotency-schema.check.ts (layout from the options starting, bounds read);
 * lib/schema/partition-ends.ts `partitionEndLimitMs` / `typicalWidthMs` (lower median of all
 * widths); lib/schema/schema-check.ts `missingSchema` -> `unboundedPartitionProblem`.
 *
 * Docs quote: lib/schema/partition-ends.ts "partitions made ahead before a change of the
 * options (a wider `partitionMs`, more `partitionsAhead`, a longer `retentionMs`, cut since:
 * adversary 111) stay until they are past, and must not stop the app from starting";
 * docs/operations/partitioned-expiry.md (101 retentions, "so that partitions made ahead before
 * a change of `partitionMs` or `partitionsAhead` never stop the app from starting").
 *
 * Severity: medium (an allowed option change, undone, refuses the start with a wrong diagnosis:
 * the library's own partitions called an operator's net; a rollback is exactly when an app must
 * start. Nothing lost; the printed DETACH/DROP works).
 *
 * Fails now: (un-skipped) the rollback's start-up throws "IdempotencySchemaMissingError: ...
 * idempotency_keys has a partition without an end in reach (public.idempotency_keys_..., up to
 * <8.4+ days ahead>, further ahead than any partition the library makes)".
 *
 * Controls: release 1 and release 2 each start on the database as it is after them.
 *
 * Suggested fix: judge by the widest partitions that are still ahead (each partition's own width
 * tells the retention it was made under: a partition of width w can legitimately end up to
 * 101 x w... ahead only if it was made by a release with retention >= w, so accept an end within
 * 101 x (its own width) / or of the widest library-aligned partition), rather than the median of
 * all; or recognise the library's partitions by name and alignment; or warn instead of refusing.
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

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const release1 = {
  retentionMs: 2 * HOUR,
  partitionedExpiry: { partitionMs: 15 * MINUTE, partitionsAhead: 20 },
};
const release2 = {
  retentionMs: 7 * DAY,
  partitionedExpiry: { partitionMs: DAY, partitionsAhead: 14 },
};

async function startUp(
  db: MigratedDatabase,
  options: typeof release1,
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
  options: typeof release1,
  key: string,
): Promise<void> {
  const store = new PartitionedPostgresClaimStore(database, options.partitionedExpiry);
  const outcome = await store.claim({ tenantId: 't', key }, Buffer.alloc(32, 1), 60_000);
  if (outcome.kind !== 'claimed') throw new Error(`not claimed: ${outcome.kind}`);
}

describePartitioned('adversary 113 readthrough: a rollback refuses the wider partitions', () => {
  let db: MigratedDatabase;
  const sources: DataSource[] = [];

  beforeAll(async () => {
    db = await createMigratedDatabase('adv113_rt_rollback', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    // Release 1 runs: a claim makes its 15-minute partitions ahead.
    const one = await startUp(db, release1, sources);
    if (one.started !== 'started') throw new Error(`release 1 refused: ${one.started}`);
    await claimOnce(one.database, release1, 'k1');
  }, 60_000);

  afterAll(async () => {
    for (const source of sources) await source.destroy().catch(() => undefined);
    await db?.drop();
  });

  it('control: release 1 restarts on its own partitions; release 2 starts and makes its own', async () => {
    expect((await startUp(db, release1, sources)).started).toBe('started');
    const two = await startUp(db, release2, sources);
    expect(two.started).toBe('started');
    await claimOnce(two.database, release2, 'k2');
    // Release 2 restarts on the partitions it made (its own daily ones, 14 days ahead).
    expect((await startUp(db, release2, sources)).started).toBe('started');
    const rows: { narrow: number; daily: number; far: boolean }[] = await sources[0].query(
      `SELECT count(*) FILTER (WHERE to_at - from_at = interval '15 minutes')::int AS narrow,
              count(*) FILTER (WHERE to_at - from_at = interval '1 day')::int AS daily,
              max(to_at) > now() + interval '9 days' AS far
       FROM idempotency_key_partitions()`,
    );
    expect(rows[0]).toEqual({ narrow: expect.any(Number), daily: expect.any(Number), far: true });
    expect(rows[0].narrow).toBeGreaterThan(rows[0].daily);
  }, 60_000);

  it('the rollback to release 1 starts on the partitions release 2 made', async () => {
    const { started } = await startUp(db, release1, sources);
    // Observed: "IdempotencySchemaMissingError: ... idempotency_keys has a partition without an
    // end in reach (public.idempotency_keys_..., up to <over 8.4 days ahead>, further ahead
    // than any partition the library makes) ...".
    expect(started).toBe('started');
  }, 30_000);
});
