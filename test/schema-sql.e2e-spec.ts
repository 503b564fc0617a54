import { readFileSync } from 'node:fs';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS } from '../lib/index.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { describeSchema } from './support/describe-schema.js';

/** `migrations/schema.sql` and the migrations leave the same tables, to the last detail. */
describe('the plain SQL schema', () => {
  let migrated: TestDatabase;
  let plain: TestDatabase;

  beforeAll(async () => {
    [migrated, plain] = await Promise.all([
      createTestDatabase('schema_migrated'),
      createTestDatabase('schema_plain'),
    ]);
  });
  afterAll(async () => {
    await migrated?.drop();
    await plain?.drop();
  });

  it('matches the migrations', async () => {
    const dataSource = new DataSource({
      type: 'postgres',
      url: migrated.url,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
    });
    await dataSource.initialize();
    await dataSource.runMigrations();
    await dataSource.query('DROP TABLE migrations');
    await dataSource.destroy();

    const client = new Client({ connectionString: plain.url });
    await client.connect();
    await client.query(readFileSync('migrations/schema.sql', 'utf8'));
    await client.end();

    const fromMigrations = await describeSchema(migrated.url);
    expect(fromMigrations.columns.length).toBeGreaterThan(10);
    expect(await describeSchema(plain.url)).toEqual(fromMigrations);
  });
});
