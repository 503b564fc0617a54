import { type DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../lib/index.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { CONTRACT_RETENTION_MS, describeClaimStoreContract } from '../lib/testing/index.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { describePartitioned } from './support/postgres-version.js';

/**
 * The store seam's contract on the partitioned table. Partitions are 100 ms wide, so that the
 * contract's retention (1 s) is kept by dropping partitions, as in production, and its
 * cases cross partition boundaries all the time.
 */
describePartitioned('on a partitioned PostgreSQL table', () => {
  let database: MigratedDatabase;
  let dataSource: DataSource;
  beforeAll(async () => {
    database = await createMigratedDatabase('contract_partitioned', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    dataSource = database.dataSource;
  });
  afterAll(async () => {
    await database?.drop();
  });

  describeClaimStoreContract('postgres, partitioned', {
    // A key that finished late is carried into the live partition, and goes with it: up to a
    // retention and a partition after the purge that carried it.
    expiryLagMs: CONTRACT_RETENTION_MS + 2 * 100,
    create: () =>
      new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => dataSource, 5000), {
        partitionMs: 100,
        partitionsAhead: 4,
      }),
  });

  it('kept the retention by dropping partitions, the migrated table’s first', async () => {
    const partitions = (await dataSource.query(
      'SELECT partition::text AS name FROM idempotency_key_partitions()',
    )) as { name: string }[];
    expect(partitions.map((p) => p.name)).not.toContain('idempotency_keys_legacy');
    const [{ dead }] = (await dataSource.query(
      `SELECT coalesce(sum(n_dead_tup), 0)::int AS dead FROM pg_stat_user_tables
       WHERE relname LIKE 'idempotency_keys%'`,
    )) as { dead: number }[];
    // Forgotten claims and takeovers leave a few; an expiry by DELETE would leave every key.
    expect(dead).toBeLessThan(20);
  });
});
