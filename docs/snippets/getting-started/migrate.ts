// migrate.ts: run the migrations once, however many instances start at the same moment
import { IDEMPOTENCY_MIGRATIONS } from 'nestjs-idempotency-pg';
import pg from 'pg';
import { DataSource } from 'typeorm';

/** Any constant: the advisory lock every instance of the app takes to migrate. */
const MIGRATION_LOCK = 7_204_611_001;

export async function migrate(url: string): Promise<void> {
  const lock = new pg.Client({ connectionString: url });
  await lock.connect();
  try {
    // The first instance migrates; the others wait here, then find nothing to do.
    await lock.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    const dataSource = new DataSource({
      type: 'postgres',
      url,
      migrations: [...IDEMPOTENCY_MIGRATIONS /* , ...your own */],
    });
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
