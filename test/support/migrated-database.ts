import { DataSource, type MigrationInterface } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS } from '../../lib/index.js';
import { createTestDatabase } from './database.js';

/** A test file's own database with the library's migrations run, and a DataSource on it. */
export interface MigratedDatabase {
  dataSource: DataSource;
  url: string;
  /** Closes the DataSource and drops the database. */
  drop(): Promise<void>;
}

/** `extra`: migrations run after the library's (the opt-in partitioned layout, say). */
export async function createMigratedDatabase(
  label: string,
  extra: (new () => MigrationInterface)[] = [],
): Promise<MigratedDatabase> {
  const database = await createTestDatabase(label);
  const dataSource = new DataSource({
    type: 'postgres',
    url: database.url,
    migrations: [...IDEMPOTENCY_MIGRATIONS, ...extra],
  });
  await dataSource.initialize();
  await dataSource.runMigrations();
  return {
    dataSource,
    url: database.url,
    drop: async () => {
      await dataSource.destroy();
      await database.drop();
    },
  };
}
