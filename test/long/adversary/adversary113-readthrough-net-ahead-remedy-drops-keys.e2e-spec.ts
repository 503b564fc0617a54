/**
 * Fixed (session of 2026-12-07): the remedy printed for a net all ahead decides when it runs, not
 * when it is printed (lib/schema/net-ahead-remedy.ts `netAheadRemedy`, printed by
 * lib/schema/schema-check.ts `unboundedPartitionProblem`): one transaction detaches the net,
 * drops it only if it holds no key, and else attaches it again with an end past its last key
 * (its keys kept) and makes the partitions ahead from there with the app's layout. The test
 * takes the whole printed transaction and runs it as printed.
 *
 * Adversary 113 (readthrough): for an operator's net whose range is still all ahead, the
 * start-up check prints "Its range is all ahead, so it holds no key yet: drop it: ALTER TABLE
 * idempotency_keys DETACH PARTITION <net>; DROP TABLE <net>" (schema-check.ts
 * `unboundedPartitionProblem` with `startsAhead`, judged by the server's clock at the check).
 * But the net starts where the library's partitions ahead end, at most (partitionsAhead + 1)
 * partitions ahead (45 minutes with `partitionedExpiry: true` and a 2-hour retention), and the
 * instances of the release still running make no partition ahead any more (the net covers
 * it): once the present reaches the net's start, every new key lands in it. An operator who
 * runs the printed remedy then, as told, unconditionally, drops those keys: a retry of a
 * request still in flight (or finished within the retention) is claimed afresh and executes a
 * second time. The remedy printed for the other case ("or, if it holds no key, DROP TABLE")
 * was conditional; this one is not, and its premise ends minutes after it is printed.
 *
 * User code:
 *   release running: IdempotencyModule.forRoot({ retentionMs, partitionedExpiry: { partitionMs,
 *     partitionsAhead } }) (here 4 s, 1 s, 1 to reach the net's start in seconds, not minutes)
 *   operator: CREATE TABLE idempotency_keys_net PARTITION OF idempotency_keys
 *     FOR VALUES FROM (<end of the last partition>) TO ('9999-12-31')
 *   a new instance's start is refused; the operator runs the SQL it printed, verbatim.
 *
 * Code path: lib/schema/schema-check.ts `unboundedPartitionProblem` (facts.startsAhead ->
 * "drop it: DETACH; DROP TABLE"), lib/schema/partition-ends.ts `startsAhead` (the check's now).
 *
 * Docs quote: the message itself: "Its range is all ahead, so it holds no key yet: drop it";
 * partition-ends.ts `startsAhead`: "it holds no key yet (a key's placed_at is never past the
 * time it was written)".
 *
 * Severity: high (the library's printed remedy, run as told, deletes a live key: the retry
 * of an in-flight request is claimed again: a second execution).
 *
 * Fails now: (un-skipped) after the remedy the retry's claim answers { kind: 'claimed' }: the
 * key claimed (in flight) by the running release was in the net, and the DROP took it.
 *
 * Controls: before the remedy the same retry answers 'existing' (the key is there, in the net).
 *
 * Suggested fix: make the remedy safe whenever it is run: e.g. DETACH, then `DO $$ BEGIN IF
 * EXISTS (SELECT FROM <net>) THEN RAISE ... 'it holds keys now: attach it with an end' ELSE
 * DROP TABLE <net>` (or print the conditional remedy "if it holds no key" with the query to
 * tell), and say the net's start is reached at <time>.
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

const layout = {
  retentionMs: 4000,
  partitionedExpiry: { partitionMs: 1000, partitionsAhead: 1 },
};

async function startUp(
  db: MigratedDatabase,
  sources: DataSource[],
): Promise<{ database: IdempotencyDatabase; started: string }> {
  const source = new DataSource({ type: 'postgres', url: db.url });
  await source.initialize();
  sources.push(source);
  const database = new IdempotencyDatabase(() => source, 5000);
  const started = await new IdempotencySchemaCheck(
    database,
    layout as unknown as ResolvedIdempotencyOptions,
  )
    .onApplicationBootstrap()
    .then(
      () => 'started',
      (error: unknown) => String(error),
    );
  return { database, started };
}

const fingerprint = Buffer.alloc(32, 7);

describePartitioned('adversary 113 readthrough: the "holds no key yet" remedy drops keys', () => {
  let db: MigratedDatabase;
  const sources: DataSource[] = [];
  let running: PartitionedPostgresClaimStore;
  let remedy = '';
  let home = '';

  beforeAll(async () => {
    db = await createMigratedDatabase('adv113_rt_net_ahead', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    const first = await startUp(db, sources);
    if (first.started !== 'started') throw new Error(`refused: ${first.started}`);
    running = new PartitionedPostgresClaimStore(first.database, layout.partitionedExpiry);
    const warmUp = await running.claim({ tenantId: 't', key: 'warm-up' }, fingerprint, 60_000);
    if (warmUp.kind !== 'claimed') throw new Error(`not claimed: ${warmUp.kind}`);
    // The operator's net, from the end of the partitions ahead.
    const [{ last }] = (await db.dataSource.query(
      'SELECT max(to_at) AS last FROM idempotency_key_partitions()',
    )) as { last: Date }[];
    await db.dataSource.query(
      'CREATE TABLE idempotency_keys_net PARTITION OF idempotency_keys FOR VALUES FROM ' +
        `('${last.toISOString()}') TO ('9999-12-31')`,
    );
    // A new instance's start is refused, with the remedy for a net all ahead.
    const second = await startUp(db, sources);
    const printed = /holds no key yet[^\n]*?from there: (BEGIN; [^\n]*?; COMMIT)/.exec(
      second.started,
    );
    if (!printed) throw new Error(`no drop remedy printed: ${second.started}`);
    remedy = printed[1];
    // The present reaches the net's start (the running release made no partition after it).
    for (;;) {
      const [{ reached }] = (await db.dataSource.query('SELECT now() >= $1 AS reached', [
        last,
      ])) as { reached: boolean }[];
      if (reached) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    // The running release takes a request: its key is claimed, the handler runs.
    const payment = await running.claim({ tenantId: 't', key: 'payment-1' }, fingerprint, 60_000);
    if (payment.kind !== 'claimed') throw new Error(`payment not claimed: ${payment.kind}`);
    const [{ partition }] = (await db.dataSource.query(
      "SELECT tableoid::regclass::text AS partition FROM idempotency_keys WHERE key = 'payment-1'",
    )) as { partition: string }[];
    home = partition;
  }, 60_000);

  afterAll(async () => {
    for (const source of sources) await source.destroy().catch(() => undefined);
    await db?.drop();
  });

  it('control: the in-flight key is in the net, and its retry is no new claim', async () => {
    expect(remedy).toContain('DROP TABLE public.idempotency_keys_net');
    expect(home).toBe('idempotency_keys_net');
    const retry = await running.claim({ tenantId: 't', key: 'payment-1' }, fingerprint, 60_000);
    expect(retry.kind).not.toBe('claimed');
  }, 30_000);

  it('the printed remedy keeps the key claimed in the net', async () => {
    await db.dataSource.query(remedy);
    const retry = await running.claim({ tenantId: 't', key: 'payment-1' }, fingerprint, 60_000);
    // Observed: 'claimed': the retry of the in-flight payment runs the handler a second time.
    expect(retry.kind).not.toBe('claimed');
  }, 30_000);
});
