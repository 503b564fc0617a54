import { DataSource, type DataSourceOptions, MigrationExecutor } from 'typeorm';
import { postgresConnection } from '../../lib/index.js';

/** Any constant: the advisory lock every instance of the app takes to migrate. */
const MIGRATION_LOCK = 7_204_611_001;

/**
 * Runs the migrations once, however many instances start at the same moment against one fresh
 * database: each waits for a PostgreSQL advisory lock, so the first migrates and the others
 * then find nothing to do (TypeORM alone would let two of them create the same table).
 *
 * The lock is a transaction's (`pg_advisory_xact_lock`), and the migrations run in that one
 * transaction on the same connection: behind a pooler in transaction mode (PgBouncer) a
 * session's lock would stay on the server connection the pooler keeps after the app let go
 * of it, and every later instance would wait for it for ever; a transaction keeps its server
 * connection to the end, and its lock ends with it, whatever stands in between.
 */
export async function migrate(options: DataSourceOptions & { url: string }): Promise<void> {
  // One host or several (the one that accepts writes): the library reads the URL.
  const connection = postgresConnection(options.url);
  const dataSource = new DataSource({
    ...options,
    url: undefined,
    ...connection,
    migrationsRun: false,
    entities: [],
  } as DataSourceOptions);
  await dataSource.initialize();
  try {
    const runner = dataSource.createQueryRunner();
    try {
      await runner.startTransaction();
      await runner.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      const executor = new MigrationExecutor(dataSource, runner);
      // In the transaction begun here, which it neither begins nor commits.
      executor.transaction = 'all';
      await executor.executePendingMigrations();
      await runner.commitTransaction();
    } catch (error) {
      if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
      throw error;
    } finally {
      await runner.release();
    }
  } finally {
    await dataSource.destroy();
  }
}
