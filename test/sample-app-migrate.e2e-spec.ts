import { Client } from 'pg';
import { MIGRATIONS } from '../sample-app/app.module.js';
import { migrate } from '../sample-app/database/migrate.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/** Several instances starting at the same moment against one fresh database. */
describe('the sample app migrating at start-up', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase('migrate');
  });
  afterAll(async () => {
    await database?.drop();
  });

  it('migrates once when five instances start at the same moment', async () => {
    const runs = await Promise.allSettled(
      Array.from({ length: 5 }, () =>
        migrate({ type: 'postgres', url: database.url, migrations: MIGRATIONS }),
      ),
    );
    expect(runs.filter((r) => r.status === 'rejected')).toEqual([]);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    const { rows } = await db.query<{ name: string }>('SELECT name FROM migrations ORDER BY id');
    await db.end();
    // Each once, in TypeORM's order: by the timestamp ending each name.
    const timestamp = (name: string) => Number(/(\d+)$/.exec(name)![1]);
    const expected = MIGRATIONS.map((m) => m.name).sort((a, b) => timestamp(a) - timestamp(b));
    expect(rows.map((r) => r.name)).toEqual(expected);
  });
});
