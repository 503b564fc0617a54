/**
 * Fixed (session of 2026-12-07, fourth): the start-up check reads each partition's bounds
 * (`idempotency_key_partitions()`) and prints the remedy for the case: a net whose range is all
 * ahead holds no key and is detached and dropped (`unboundedPartitionProblem`'s `startsAhead`);
 * the test now runs the statements the refusal prints, as printed.
 *
 * Adversary 110 (pool): the refusal's remedy for a partition without an end, "Give it an end:
 * ALTER TABLE public.idempotency_keys DETACH PARTITION <it>; ALTER TABLE public.idempotency_keys
 * ATTACH PARTITION <it> FOR VALUES FROM (<its start>) TO (now())", fails as printed for the
 * usual such net: one added from the end of the partitions made ahead (`FROM (<end of the last
 * partition>) TO (MAXVALUE)`), whose start is still in the future when the app next starts and
 * is refused. `TO (now())` is then below its start, and PostgreSQL refuses the ATTACH ("empty
 * range bound specified for partition"), after the DETACH went through. Nothing is lost (such a
 * partition holds no key yet, and the remedy's other branch, DROP TABLE after the DETACH, fits),
 * but the first remedy, run as printed, errors.
 *
 * User code: an operator's `CREATE TABLE idempotency_keys_rest PARTITION OF idempotency_keys FOR
 * VALUES FROM ('<end of the last partition>') TO (MAXVALUE)`, the app restarted, the refusal's
 * first remedy run with `<its start>` read from `idempotency_key_partitions()`.
 *
 * Code path: lib/schema/schema-check.ts `unboundedPartitionProblem` (`TO (now())` whatever the
 * start).
 *
 * Docs quote: docs/operations/partitioned-expiry.md "Give it an end: ALTER TABLE ... DETACH
 * PARTITION ...; ALTER TABLE ... ATTACH PARTITION ... FOR VALUES FROM (<its start>) TO (now())
 * (its keys kept, it expires with the others)"; the brief: remedies work when run as printed.
 *
 * Severity: low (an error from the printed remedy; the partition is left detached, the app then
 * starts; nothing lost).
 *
 * Fails now: (un-skipped) the ATTACH fails with "empty range bound specified for partition
 * \"idempotency_keys_rest\"".
 *
 * Controls: the same net once live (its start past): the printed remedy goes through and the
 * start-up check passes.
 *
 * Suggested fix: `TO (greatest(now(), <its start> + interval '1 millisecond'))` is no better (an
 * empty partition ahead blocks the library's own); say "if its start is still ahead (it holds no
 * key): DETACH and DROP TABLE", or print the statements for the case the catalog shows.
 */
import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { IdempotencyDatabase } from '../../../lib/data-layers/idempotency-database.js';
import { IdempotencySchemaCheck } from '../../../lib/idempotency-schema.check.js';
import { type ResolvedIdempotencyOptions } from '../../../lib/shapes/idempotency-options.interface.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { describePartitioned } from '../../support/postgres-version.js';

if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

const PARTITION_MS = 60_000;

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

/** The refusal's message, or undefined when the start-up check passes. */
function refusal(fresh: DataSource): Promise<string | undefined> {
  const options = {
    partitionedExpiry: { partitionMs: PARTITION_MS, partitionsAhead: 2 },
  } as unknown as ResolvedIdempotencyOptions;
  return new IdempotencySchemaCheck(new IdempotencyDatabase(() => fresh, 5000), options)
    .onApplicationBootstrap()
    .then(
      () => undefined,
      (error: unknown) => String(error),
    );
}

/**
 * The statements of the refusal's remedy for the net, as printed: the DETACH, then what
 * follows it (the ATTACH up to now(), `<its start>` read from `idempotency_key_partitions()`),
 * or, for a net all ahead, the one transaction printed (adversary 113).
 */
function printedRemedy(message: string, from: string): string[] {
  const line = message.split('\n').find((l) => l.includes('idempotency_keys_rest'));
  // For a net all ahead, one transaction that decides when it runs (adversary 113).
  const whole = line?.match(/(BEGIN; .*?; COMMIT)/);
  if (whole) return [whole[1]];
  const printed = line?.match(
    /(ALTER TABLE \S+ DETACH PARTITION \S+); (ALTER TABLE \S+ ATTACH PARTITION .*? TO \(now\(\)\)|DROP TABLE \S+)/,
  );
  if (!printed) throw new Error(`no remedy printed: ${message}`);
  return [printed[1], printed[2].replace('<its start>', `'${from}'`)];
}

/** The net from the end of the last partition to MAXVALUE, refused; then the printed remedy. */
async function story(database: MigratedDatabase, fresh: DataSource, madeAhead: boolean) {
  const q = (sql: string) => database.dataSource.query(sql);
  // The partitions ahead as the app makes them (else only the migration's, ending in the past).
  if (madeAhead) await q('SELECT idempotency_keys_create_partitions(60000, 2)');
  await q(`DO $$ BEGIN
    EXECUTE format('CREATE TABLE idempotency_keys_rest PARTITION OF idempotency_keys '
      'FOR VALUES FROM (%L) TO (MAXVALUE)', (SELECT max(to_at) FROM idempotency_key_partitions()));
  END $$`);
  const message = await refusal(fresh);
  const before = message !== undefined;
  const [{ from }] = (await q(
    `SELECT from_at::text AS from FROM idempotency_key_partitions()
     WHERE partition = 'idempotency_keys_rest'::regclass`,
  )) as { from: string }[];
  let remedy = 'ok';
  try {
    for (const statement of printedRemedy(message ?? '', from)) await q(statement);
  } catch (error) {
    remedy = String(error);
  }
  return { before, remedy, after: await refused(fresh) };
}

describePartitioned(
  "adversary 110 pool: the unbounded partition's remedy, for a net still ahead",
  () => {
    const databases: MigratedDatabase[] = [];
    const sources: DataSource[] = [];

    async function fresh(label: string) {
      const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
      const source = new DataSource({ type: 'postgres', url: database.url });
      await source.initialize();
      databases.push(database);
      sources.push(source);
      return { database, source };
    }

    afterAll(async () => {
      for (const source of sources) await source.destroy();
      for (const database of databases) await database.drop();
    });

    it('control: a net already live (its start past) takes the printed remedy', async () => {
      const { database, source } = await fresh('adv110_pool_unbounded_live');
      expect(await story(database, source, false)).toEqual({
        before: true,
        remedy: 'ok',
        after: false,
      });
    }, 60_000);

    it('a net from the end of the partitions ahead takes the printed remedy', async () => {
      const { database, source } = await fresh('adv110_pool_unbounded_ahead');
      const outcome = await story(database, source, true);
      // Observed: remedy 'QueryFailedError: empty range bound specified for partition "idempotency_keys_rest"'.
      expect(outcome).toEqual({ before: true, remedy: 'ok', after: false });
    }, 60_000);
  },
);
