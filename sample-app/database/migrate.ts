import pg from 'pg';
import { DataSource, type DataSourceOptions } from 'typeorm';

/** Any constant: the advisory lock every instance of the app takes to migrate. */
const MIGRATION_LOCK = 7_204_611_001;

/**
 * Runs the migrations once, however many instances start at the same moment against one fresh
 * database: each waits for a PostgreSQL advisory lock, so the first migrates and the others
 * then find nothing to do (TypeORM alone would let two of them create the same table).
 */
export async function migrate(options: DataSourceOptions & { url: string }): Promise<void> {
  const lock = new pg.Client({ connectionString: options.url });
  await lock.connect();
  try {
    await lock.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    const dataSource = new DataSource({
      ...options,
      migrationsRun: false,
      entities: [],
    } as DataSourceOptions);
    await dataSource.initialize();
    try {
      await dataSource.runMigrations({ transaction: 'each' });
    } finally {
      await dataSource.destroy();
    }
  } finally {
    await lock.end(); // ends the session, and the lock with it
  }
}
