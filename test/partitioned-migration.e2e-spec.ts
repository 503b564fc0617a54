import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000 } from '../lib/index.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { describeSchema } from './support/describe-schema.js';
import { partitionOf, partitions, untilDatabaseTime } from './support/partitions.js';
import { describePartitioned, PARTITIONS_SUPPORTED } from './support/postgres-version.js';

/**
 * The documented way to move an existing table: the migration, on a table that holds keys.
 * Up: every row stays, in the first partition, and is found, replayed and taken over as
 * before; that partition expires like any other. Down: every row, in whichever partition,
 * goes back into a table exactly like the plain migrations'.
 */
if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

const fp = Buffer.alloc(32, 4);
const RETENTION_MS = 1500;

interface Snapshot {
  tenant_id: string;
  key: string;
  state: string;
  claim_id: string;
  lock_version: string;
  recovery_point: string;
  phase_results: Record<string, unknown>;
  response_body: Buffer | null;
  created_at: Date;
  finished_at: Date | null;
  leased_at: Date | null;
}

describePartitioned('the PartitionIdempotencyKeys migration on a table with keys', () => {
  let database: TestDatabase;
  let fresh: TestDatabase;
  let dataSource: DataSource;
  let store: PartitionedPostgresClaimStore;
  let before: Snapshot[];

  const snapshot = async (where = 'true') =>
    (await dataSource.query(
      `SELECT tenant_id, key, state, claim_id, lock_version, recovery_point, phase_results,
              response_body, created_at, finished_at, leased_at
       FROM idempotency_keys WHERE ${where} ORDER BY tenant_id, key`,
    )) as Snapshot[];
  const relkind = async () =>
    (
      (await dataSource.query(
        `SELECT relkind FROM pg_class WHERE oid = 'idempotency_keys'::regclass`,
      )) as { relkind: string }[]
    )[0].relkind;

  beforeAll(async () => {
    [database, fresh] = await Promise.all([
      createTestDatabase('partition_migration'),
      createTestDatabase('partition_migration_fresh'),
    ]);
    const plain = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
    });
    await plain.initialize();
    await plain.runMigrations();
    await plain.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, response_code,
         response_body, response_headers, finished_at, created_at) VALUES
       ('42', 'done', $1, 'done', 201, '\\x7b226964223a317d', '{"content-type":"application/json"}',
        now() - interval '1 minute', now() - interval '2 minutes'),
       ('42', 'old', $1, 'done', 201, '\\x7b7d', '{}', now() - interval '2 days',
        now() - interval '2 days')`,
      [fp],
    );
    // Two crashed workers' keys: a phase done, the lease long expired, taken over once (its
    // hold's start, `leased_at`, kept by the migration both ways: AddLeasedAt ran before it).
    await plain.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, recovery_point, phase_results,
         locked_until, lock_version, created_at, leased_at)
       SELECT '42', k, $1, 'charge_created', '{"charge_created":{"psp":"auth_7"}}',
              now() - interval '1 minute', 1, now() - interval '10 minutes',
              now() - interval '3 minutes'
       FROM unnest(ARRAY['crashed', 'crashed-2']) k`,
      [fp],
    );
    await plain.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, response_code,
         response_body, finished_at)
       SELECT (g % 7)::text, 'bulk-' || g, $1, 'done', 200, '\\x7b7d', now()
       FROM generate_series(1, 5000) g`,
      [fp],
    );
    await plain.destroy();

    dataSource = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000],
    });
    await dataSource.initialize();
    before = await snapshot();
    store = new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => dataSource, 5000), {
      partitionMs: 1000,
      partitionsAhead: 2,
    });
  });
  afterAll(async () => {
    await dataSource?.destroy();
    await database?.drop();
    await fresh?.drop();
  });

  it('up: keeps every row, as it was, in the first partition', async () => {
    await dataSource.runMigrations();
    expect(await relkind()).toBe('p');
    expect(await snapshot()).toEqual(before);
    const held = (await dataSource.query(
      `SELECT tableoid::regclass::text AS name, count(*)::int AS n FROM idempotency_keys GROUP BY 1`,
    )) as { name: string; n: number }[];
    expect(held).toEqual([{ name: 'idempotency_keys_legacy', n: 5004 }]);
    // The old table's BRIN index became the partition's, rather than a second one.
    const indexes = (await dataSource.query(
      `SELECT indexname FROM pg_indexes WHERE tablename = 'idempotency_keys_legacy' ORDER BY 1`,
    )) as { indexname: string }[];
    expect(indexes.map((row) => row.indexname)).toEqual([
      'idempotency_keys_legacy_created_at_idx',
      'idempotency_keys_legacy_pkey',
    ]);
  });

  it('serves the old keys: a replay, a takeover with the same claim id and phases', async () => {
    const replay = await store.claim({ tenantId: '42', key: 'done' }, fp, 60_000);
    expect(replay).toMatchObject({ kind: 'existing', existing: { state: 'done' } });
    if (replay.kind === 'existing' && replay.existing.state === 'done') {
      expect(replay.existing.response.body.toString()).toBe('{"id":1}');
    }
    const crashed = before.find((row) => row.key === 'crashed')!;
    const found = await store.claim({ tenantId: '42', key: 'crashed' }, fp, 60_000);
    if (found.kind !== 'existing' || found.existing.state !== 'started') throw new Error();
    const resumed = await store.takeOver(
      { tenantId: '42', key: 'crashed' },
      found.existing.fence,
      60_000,
    );
    expect(resumed).toMatchObject({
      claimId: crashed.claim_id,
      recoveryPoint: 'charge_created',
      phaseResults: { charge_created: { psp: 'auth_7' } },
    });
    const fresh = await store.claim({ tenantId: '42', key: 'new-after-up' }, fp, 60_000);
    expect(fresh.kind).toBe('claimed');
    expect(await partitionOf(dataSource, 'new-after-up')).not.toBe('idempotency_keys_legacy');

    // Finished a second before the first partition expires: it must outlive it.
    const legacy = (await partitions(dataSource)).find(
      (p) => p.name === 'idempotency_keys_legacy',
    )!;
    await untilDatabaseTime(dataSource, new Date(legacy.toAt!.getTime() + RETENTION_MS - 1000));
    const body = { status: 201, headers: {}, body: Buffer.from('"resumed"') };
    expect(await store.finish(resumed!, body)).toBe(true);
  });

  it('drops the first partition once past the retention, its survivors carried forward', async () => {
    const legacy = (await partitions(dataSource)).find(
      (p) => p.name === 'idempotency_keys_legacy',
    )!;
    await untilDatabaseTime(dataSource, new Date(legacy.toAt!.getTime() + RETENTION_MS + 50));
    await store.purgeBatch(RETENTION_MS);
    expect((await partitions(dataSource)).map((p) => p.name)).not.toContain(
      'idempotency_keys_legacy',
    );
    const left = (await snapshot(`tenant_id = '42'`)).map((row) => [row.key, row.state]);
    expect(left).toEqual([
      ['crashed', 'done'], // finished within the retention
      ['crashed-2', 'started'], // unfinished: kept until abandonedKeyRetentionMs
      ['new-after-up', 'started'],
    ]);
    const crashed2 = before.find((row) => row.key === 'crashed-2')!;
    expect((await snapshot(`key = 'crashed-2'`))[0]).toEqual(crashed2);
  });

  it('down: moves every row of every partition back into the plain table', async () => {
    // Rows in two partitions at least: the late ones go in after the partition of the keys
    // already there has ended (the steps before may all fall within one 1 s partition).
    const holding = await partitionOf(dataSource, 'new-after-up');
    const current = (await partitions(dataSource)).find((p) => p.name === holding)!;
    await untilDatabaseTime(dataSource, new Date(current.toAt!.getTime() + 50));
    await dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, response_code,
         response_body, finished_at)
       SELECT '9', 'late-' || g, $1, 'done', 200, '\\x7b7d', now() FROM generate_series(1, 50) g`,
      [fp],
    );
    const partitioned = await snapshot();
    expect(new Set(await partitionsHolding()).size).toBeGreaterThan(1);

    await dataSource.undoLastMigration();
    expect(await relkind()).toBe('r');
    expect(await snapshot()).toEqual(partitioned);
    const functions = (await dataSource.query(
      `SELECT proname FROM pg_proc WHERE proname LIKE 'idempotency%' ORDER BY 1`,
    )) as unknown[];
    expect(functions).toEqual([]);

    const plainStore = new PostgresClaimStore(new IdempotencyDatabase(() => dataSource, 5000));
    const replay = await plainStore.claim({ tenantId: '42', key: 'crashed' }, fp, 60_000);
    expect(replay).toMatchObject({ kind: 'existing', existing: { state: 'done' } });

    // The schema is the plain migrations' to the last detail, constraint names included.
    const reference = new DataSource({
      type: 'postgres',
      url: fresh.url,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
    });
    await reference.initialize();
    await reference.runMigrations();
    const constraintNames = (source: DataSource) =>
      source.query(
        `SELECT conname FROM pg_constraint WHERE conrelid = 'idempotency_keys'::regclass
         ORDER BY 1`,
      );
    expect(await constraintNames(dataSource)).toEqual(await constraintNames(reference));
    await reference.destroy();
    expect(await describeSchema(database.url)).toEqual(await describeSchema(fresh.url));
  });

  it('up again after down: the round trip keeps every key', async () => {
    const keys = await snapshot();
    await dataSource.runMigrations();
    expect(await relkind()).toBe('p');
    expect(await snapshot()).toEqual(keys);
  });

  async function partitionsHolding(): Promise<string[]> {
    const rows = (await dataSource.query(
      'SELECT DISTINCT tableoid::regclass::text AS name FROM idempotency_keys',
    )) as { name: string }[];
    return rows.map((row) => row.name);
  }
});

(PARTITIONS_SUPPORTED ? describe.skip : describe)('the migration on PostgreSQL 13', () => {
  let database: TestDatabase;
  afterAll(async () => {
    await database?.drop();
  });

  it('refuses, saying why, and leaves the table as it was', async () => {
    database = await createTestDatabase('partition_migration_13');
    const dataSource = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000],
    });
    await dataSource.initialize();
    try {
      // Each in its own transaction: the plain table is made, then the refusal leaves it be.
      await expect(dataSource.runMigrations({ transaction: 'each' })).rejects.toThrow(
        /PartitionIdempotencyKeys needs PostgreSQL 14 or later \(this server is 13\d{4}\): expiry detaches partitions CONCURRENTLY/,
      );
      const [{ relkind }] = (await dataSource.query(
        `SELECT relkind FROM pg_class WHERE oid = 'idempotency_keys'::regclass`,
      )) as { relkind: string }[];
      expect(relkind).toBe('r');
    } finally {
      await dataSource.destroy();
    }
  });
});
