import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS } from '../../lib/index.js';
import { createTestDatabase } from './database.js';

/** A test file's own database with the library's migrations run, and a DataSource on it. */
export interface MigratedDatabase {
  dataSource: DataSource;
  url: string;
  /** Closes the DataSource and drops the database. */
  drop(): Promise<void>;
}

export async function createMigratedDatabase(label: string): Promise<MigratedDatabase> {
  const database = await createTestDatabase(label);
  const dataSource = new DataSource({
    type: 'postgres',
    url: database.url,
    migrations: [...IDEMPOTENCY_MIGRATIONS],
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
