import pg from 'pg';
import { DataSource, type DataSourceOptions } from 'typeorm';
import { postgresConnection } from '../../lib/index.js';

/** Any constant: the advisory lock every instance of the app takes to migrate. */
const MIGRATION_LOCK = 7_204_611_001;

/**
 * Runs the migrations once, however many instances start at the same moment against one fresh
 * database: each waits for a PostgreSQL advisory lock, so the first migrates and the others
 * then find nothing to do (TypeORM alone would let two of them create the same table).
 */
export async function migrate(options: DataSourceOptions & { url: string }): Promise<void> {
  // One host or several (the one that accepts writes): the library reads the URL.
  const connection = postgresConnection(options.url);
  // What the URL says for the pool (`connect_timeout`) holds for the lock's connection too.
  const { Client: Lock = pg.Client, ...pool } = connection.extra ?? {};
  const lock = new Lock({
    ...pool,
    ...(connection.url
      ? { connectionString: connection.url }
      : {
          host: connection.host,
          port: connection.port,
          user: connection.username,
          password: connection.password,
          database: connection.database,
        }),
  });
  await lock.connect();
  try {
    await lock.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    const dataSource = new DataSource({
      ...options,
      url: undefined,
      ...connection,
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
