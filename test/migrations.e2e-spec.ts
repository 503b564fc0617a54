import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS } from '../lib/index.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * The migrations on a table that already holds keys: rows written before a migration are
 * found, under the same tenant, after it.
 */
describe('migrating a table that holds keys', () => {
  let database: TestDatabase;
  let dataSource: DataSource;
  const fp = Buffer.alloc(32, 3);

  beforeAll(async () => {
    database = await createTestDatabase('migrations');
  });
  afterAll(async () => {
    await dataSource?.destroy();
    await database?.drop();
  });

  it('keeps integer tenants’ keys under the same tenant when tenant ids become text', async () => {
    const before = IDEMPOTENCY_MIGRATIONS.filter((m) => !m.name.startsWith('TextTenantIds'));
    const early = new DataSource({ type: 'postgres', url: database.url, migrations: before });
    await early.initialize();
    await early.runMigrations();
    await early.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, response_code,
         response_body, response_headers, finished_at)
       VALUES (42, 'old-key', $1, 'done', 201, '\\x7b7d', '{}', now())`,
      [fp],
    );
    await early.destroy();

    dataSource = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
    });
    await dataSource.initialize();
    await dataSource.runMigrations();
    const [{ data_type }] = (await dataSource.query(
      `SELECT data_type FROM information_schema.columns
       WHERE table_name = 'idempotency_keys' AND column_name = 'tenant_id'`,
    )) as { data_type: string }[];
    expect(data_type).toBe('text');

    const store = new PostgresClaimStore(new IdempotencyDatabase(() => dataSource, 5000));
    const found = await store.claim({ tenantId: '42', key: 'old-key' }, fp, 60_000);
    expect(found).toMatchObject({ kind: 'existing', existing: { state: 'done' } });
    const uuid = await store.claim(
      { tenantId: '0b6c7c2e-7d1b-4c39-9f4e-2f1d0a9b8c7d', key: 'old-key' },
      fp,
      60_000,
    );
    expect(uuid.kind).toBe('claimed');
  });
});
