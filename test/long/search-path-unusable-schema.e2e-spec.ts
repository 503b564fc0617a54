import { Controller, type DynamicModule, Module, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { DataSource, type MigrationInterface } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../lib/index.js';
import { bootstrapTestApp } from '../support/bootstrap.js';
import { adminUrl, createTestDatabase, type TestDatabase } from '../support/database.js';

/**
 * Found by an adversarial review (issue 27): the start-up check's reading of the role's search_path
 * (lib/schema/search-path-schemas.ts). PostgreSQL splits the setting as a list of
 * identifiers (a quoted name may hold a comma), downcases only ASCII letters of an unquoted
 * name, and truncates names to 63 bytes; the check splits on every comma and lower()s with
 * the database's locale, so for such a schema it misses the unusable one and sends the user
 * to run migrations that already ran.
 */
@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  create() {
    return { ok: true };
  }
}

@Module({ controllers: [PaymentsController] })
class PaymentsModule {}

async function migrate(url: string, migrations: (new () => MigrationInterface)[]): Promise<void> {
  const dataSource = new DataSource({ type: 'postgres', url, migrations });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations();
  } finally {
    await dataSource.destroy();
  }
}

function appModule(url: string): DynamicModule {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, logging: false, connectTimeoutMS: 1000 }),
      IdempotencyModule.forRoot({ globalKeys: true, databaseTimeoutMs: 2000 }),
      PaymentsModule,
    ],
  })
  class SchemaTestModule {}
  return { module: SchemaTestModule };
}

async function startFailure(url: string): Promise<unknown> {
  try {
    const app = await bootstrapTestApp(appModule(url).module, 'express');
    await app.close();
    return undefined;
  } catch (error) {
    return error;
  }
}

describe('the start-up check for a schema without USAGE, odd search_path names', () => {
  let database: TestDatabase;
  beforeEach(async () => {
    database = await createTestDatabase('adv_search_path');
  });
  afterEach(() => database?.drop());

  // What must hold: as for any other schema, the check names the schema and the GRANT
  // USAGE (the migrations ran), e.g. "- the role r may not use schema idem,keys, which holds
  // idempotency_keys, processed_messages, message_failures: GRANT USAGE ON SCHEMA "idem,keys"
  // TO r". It answered "table idempotency_keys is missing (migration ...)" and the remedy
  // to run the migrations.
  it.each<{ path: string; schema: string; shown: string }>([
    {
      path: 'a quoted name with a comma: "idem,keys",public',
      schema: '"idem,keys"',
      shown: 'idem,keys',
    },
    {
      // PostgreSQL downcases only ASCII letters of an unquoted name: ÉCOLE_IDEM is "École_idem".
      path: 'an unquoted name with a non-ASCII capital: ÉCOLE_IDEM,public',
      schema: '"École_idem"',
      shown: 'École_idem',
    },
    {
      // PostgreSQL truncates a name in the path to 63 bytes, as everywhere.
      path: `a name longer than 63 bytes: ${'i'.repeat(63)}_keys,public`,
      schema: 'i'.repeat(63),
      shown: 'i'.repeat(63),
    },
  ])(
    'refuses to start naming the GRANT USAGE, not the migrations (search_path $path)',
    async ({ path, schema, shown }) => {
      const role = `idem_nousage_${randomBytes(3).toString('hex')}`;
      const db = new Client({ connectionString: database.url });
      await db.connect();
      await db.query('CREATE SCHEMA idem_migrated');
      const migrated = new URL(database.url);
      migrated.searchParams.set('options', '-c search_path=idem_migrated');
      await migrate(migrated.toString(), IDEMPOTENCY_MIGRATIONS);
      await db.query(`ALTER SCHEMA idem_migrated RENAME TO ${schema}`);
      try {
        await db.query(`CREATE ROLE ${role} LOGIN PASSWORD 'nousage'`);
        await db.query(`GRANT CONNECT ON DATABASE ${database.name} TO ${role}`);
        // The setting as the connection's options carry it, as written.
        const setting = path.slice(path.indexOf(': ') + 2);
        await db.query(
          `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${schema} TO ${role}`,
        );
        const url = new URL(database.url);
        url.username = role;
        url.password = 'nousage';
        url.searchParams.set('options', `-c search_path=${setting}`);
        const error = await startFailure(url.toString());
        const grant = `GRANT USAGE ON SCHEMA ${schema} TO ${role}`;
        expect((error as Error).message).toBe(
          "IdempotencyModule: the app's database lacks what the library needs:\n" +
            `- the role ${role} may not use schema ${shown}, which holds idempotency_keys, ` +
            `processed_messages, message_failures: ${grant}\n`,
        );
        // PostgreSQL itself resolves the path to that schema once the GRANT is given.
        await db.query(grant);
        expect(await startFailure(url.toString())).toBeUndefined();
      } finally {
        await db.query(`DROP OWNED BY ${role}`);
        await db.end();
        const admin = new Client({ connectionString: adminUrl() });
        await admin.connect();
        await admin.query(`DROP ROLE IF EXISTS ${role}`);
        await admin.end();
      }
    },
  );
});
