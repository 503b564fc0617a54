/**
 * Fixed (session of 2026-12-07, fourth): the limit is 101 times the largest of `partitionMs`,
 * `retentionMs` and the median width of the partitions present (partition-ends.ts
 * `typicalWidthMs`): a partition is at most a retention wide, so the widths tell the retention
 * they were made under, and a net or two cannot move a median.
 *
 * Adversary 111 (pool): the start-up check's new partition-end limit (`partitionEndLimitMs`:
 * 101 times the larger of `partitionMs` and `retentionMs`) is computed from the options of the
 * deploy that starts, not of the one that made the partitions. Cutting `retentionMs` (7 days to
 * 2 hours, say, to save storage) between deploys leaves the partitions the previous release
 * made ahead (14 days of them) ending further ahead than 101 new retentions: the app refuses to
 * start, calling the library's own partitions "an operator's net ... further ahead than any
 * partition the library makes", which they are not. The code comment and the docs promise the
 * opposite for exactly this case: partitions made ahead before a change of the options "stay
 * until they are past, and must not stop the app from starting".
 *
 * User code:
 *   release 1: IdempotencyModule.forRoot({ retentionMs: 7 * DAY,
 *     partitionedExpiry: { partitionMs: DAY, partitionsAhead: 14 } })   (ran, made partitions)
 *   release 2: IdempotencyModule.forRoot({ retentionMs: 2 * HOUR, partitionedExpiry: true })
 *
 * Code path: lib/idempotency-schema.check.ts (layout from the options starting);
 * lib/schema/partition-ends.ts `partitionEndLimitMs`, `partitionsEndingTooFar`;
 * lib/schema/schema-check.ts `missingSchema` / `unboundedPartitionProblem`.
 *
 * Docs quote: docs/operations/partitioned-expiry.md "one ending further ahead than any partition
 * the library makes, 101 retentions (at most 100 partitions ahead, each at most a retention
 * wide, so that partitions made ahead before a change of `partitionMs` or `partitionsAhead` never
 * stop the app from starting), is refused"; lib/schema/partition-ends.ts "partitions made ahead
 * under a wider `partitionMs` (or more `partitionsAhead`) before a change of the options stay
 * until they are past, and must not stop the app from starting".
 *
 * Severity: medium (an allowed option change refuses the start with a wrong diagnosis: the
 * library's own partitions taken for an operator's net; nothing lost, the printed DROP works).
 *
 * Fails now: (un-skipped) release 2's start-up throws `IdempotencySchemaMissingError: ...
 * idempotency_keys has a partition without an end in reach
 * (public.idempotency_keys_20261216t000000000, up to 2026-12-17T00:00:00.000Z, further ahead than
 * any partition the library makes), which the partitioned expiry cannot expire: once the present
 * reaches it no partition is made ahead and its keys stay for ever ...` (test run 2026-12-07),
 * one such line for each partition release 1 made more than 8.4 days (101 × 2 h) ahead.
 *
 * Controls: release 1's own start passes; release 2 on a fresh database passes.
 *
 * Suggested fix: judge a partition's end against a bound that does not depend on the options
 * now (the library's partitions are the ones `idempotency_keys_create_partitions()` names and
 * aligns: recognise them by name/alignment, or only refuse ends beyond a fixed far horizon, e.g.
 * 100 × the largest retention the options allow, or years), or at least word the message as
 * "maybe made by a release with a longer retention" and warn rather than refuse.
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
const release1 = {
  retentionMs: 7 * DAY,
  partitionedExpiry: { partitionMs: DAY, partitionsAhead: 14 },
};
// `partitionedExpiry: true` resolved: { partitionMs: retentionMs / 8, partitionsAhead: 2 }.
const release2 = {
  retentionMs: 2 * HOUR,
  partitionedExpiry: { partitionMs: (2 * HOUR) / 8, partitionsAhead: 2 },
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

describePartitioned('adversary 111 pool: a cut retention refuses the partitions made ahead', () => {
  let used: MigratedDatabase;
  let fresh: MigratedDatabase;
  const sources: DataSource[] = [];

  beforeAll(async () => {
    used = await createMigratedDatabase('adv111_pool_retention_cut', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    fresh = await createMigratedDatabase('adv111_pool_retention_fresh', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    // Release 1 runs: a claim makes its partitions ahead.
    const { database, started } = await startUp(used, release1, sources);
    if (started !== 'started') throw new Error(`release 1 refused: ${started}`);
    const store = new PartitionedPostgresClaimStore(database, release1.partitionedExpiry);
    const outcome = await store.claim({ tenantId: 't', key: 'k1' }, Buffer.alloc(32, 1), 60_000);
    if (outcome.kind !== 'claimed') throw new Error(`not claimed: ${outcome.kind}`);
  }, 60_000);

  afterAll(async () => {
    for (const source of sources) await source.destroy().catch(() => undefined);
    await used?.drop();
    await fresh?.drop();
  });

  it('control: release 1 restarts; release 2 starts on a fresh database', async () => {
    expect((await startUp(used, release1, sources)).started).toBe('started');
    expect((await startUp(fresh, release2, sources)).started).toBe('started');
  }, 30_000);

  it('release 2 starts on the partitions release 1 made ahead', async () => {
    const { started } = await startUp(used, release2, sources);
    // Observed: "IdempotencySchemaMissingError: ... idempotency_keys has a partition without an
    // end in reach (public.idempotency_keys_..., up to <14 days ahead>, further ahead than any
    // partition the library makes) ...".
    expect(started).toBe('started');
  }, 30_000);
});
