import {
  Controller,
  type DynamicModule,
  type INestApplication,
  Injectable,
  Logger,
  type LoggerService,
  Module,
  type OnModuleInit,
  Post,
} from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import amqplib from 'amqplib';
import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource, type MigrationInterface } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  type IdempotencyModuleBaseOptions,
  Idempotent,
  PartitionIdempotencyKeys1764461600000,
} from '../../lib/index.js';
import { CreateResponseBodies1764461500000 } from '../../migrations/1764461500000-CreateResponseBodies.js';
import { startEmbeddedPostgres } from '../../sample-app/database/embedded-postgres.js';
import { defaultPartitionProblem } from '../../lib/schema/schema-check.js';
import { ADAPTERS, type AdapterName, bootstrapTestApp } from '../support/bootstrap.js';
import { RABBITMQ_URL, onRabbitMq, until } from '../support/brokers.js';
import { adminUrl, createTestDatabase, type TestDatabase } from '../support/database.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { startWorker, type WorkerProcess } from '../support/worker-process.js';

/**
 * First contact with a database the library's migrations did not (fully) reach, and with
 * refusals of the database that no retry passes: the app refuses to start saying what to do,
 * and a request is a 500 `database_permanent` without `Retry-After`, never a 503 to retry for
 * ever. Each app here runs no migrations of its own: the tests shape the schema.
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

const REMEDY =
  "Run the library's migrations in the app's DataSource (migrations: " +
  '[...IDEMPOTENCY_MIGRATIONS, ...yours], then migrationsRun: true or `typeorm migration:run`; ' +
  'with partitionedExpiry, PartitionIdempotencyKeys1764461600000 after them), or apply the ' +
  "package's migrations/schema.sql with your own migration tool.";
const lacking = (...problems: string[]) =>
  "IdempotencyModule: the app's database lacks what the library needs:\n" +
  problems.map((problem) => `- ${problem}\n`).join('') +
  REMEDY;
/** For the partitioned layout, which schema.sql does not hold: only the migrations (adversary 109). */
const LAYOUT_REMEDY =
  "Run the library's migrations in the app's DataSource (migrations: " +
  '[...IDEMPOTENCY_MIGRATIONS, ...yours], then migrationsRun: true or `typeorm migration:run`; ' +
  'with partitionedExpiry, PartitionIdempotencyKeys1764461600000 after them). The partitioned ' +
  'layout is not in schema.sql: without TypeORM migrations, run ' +
  'PartitionIdempotencyKeys1764461600000 and PinPartitionFunctions1764461800000 once with a ' +
  "DataSource of their own (new DataSource({ type: 'postgres', url, migrations: " +
  '[PartitionIdempotencyKeys1764461600000, PinPartitionFunctions1764461800000] }), then ' +
  'initialize() and runMigrations(); see docs/operations/partitioned-expiry.md).';
const lackingLayout = (...problems: string[]) =>
  lacking(...problems).slice(0, -REMEDY.length) + LAYOUT_REMEDY;

const PERMANENT_DETAIL =
  'The database refused the idempotency store for a reason that lasts (a missing table, ' +
  'column or function, a missing privilege, a read-only session, a character it cannot ' +
  'store); nothing was stored. ' +
  'Retrying will not help until the database is fixed.';

/** Runs `migrations` on the database at `url`. */
async function migrate(url: string, migrations: (new () => MigrationInterface)[]): Promise<void> {
  const dataSource = new DataSource({ type: 'postgres', url, migrations });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations();
  } finally {
    await dataSource.destroy();
  }
}

const errors: string[] = [];
const capture: LoggerService = {
  log: () => undefined,
  warn: () => undefined,
  error: (message: unknown) => errors.push(String(message)),
};

/** A hook that runs once TypeORM has connected and before the module's start-up check. */
const BEFORE_CHECK = 'BEFORE_SCHEMA_CHECK';

function appModule(
  url: string,
  idempotency: IdempotencyModuleBaseOptions = {},
  beforeCheck?: () => Promise<void>,
): DynamicModule {
  @Injectable()
  class BeforeCheck implements OnModuleInit {
    async onModuleInit() {
      await beforeCheck?.();
    }
  }
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, logging: false, connectTimeoutMS: 1000 }),
      IdempotencyModule.forRoot({ globalKeys: true, databaseTimeoutMs: 2000, ...idempotency }),
      PaymentsModule,
    ],
    providers: [{ provide: BEFORE_CHECK, useClass: BeforeCheck }],
  })
  class SchemaTestModule {}
  return { module: SchemaTestModule };
}

async function startApp(
  url: string,
  adapter: AdapterName,
  idempotency: IdempotencyModuleBaseOptions = {},
  beforeCheck?: () => Promise<void>,
): Promise<INestApplication> {
  const { module } = appModule(url, idempotency, beforeCheck);
  return bootstrapTestApp(module, adapter);
}

/** The error that stopped the app's start, or undefined when it started (and is closed). */
async function startFailure(
  url: string,
  idempotency: IdempotencyModuleBaseOptions = {},
): Promise<unknown> {
  try {
    const app = await startApp(url, 'express', idempotency);
    await app.close();
    return undefined;
  } catch (error) {
    return error;
  }
}

const pay = (app: INestApplication, key: string) =>
  request(app.getHttpServer()).post('/payments').set('Idempotency-Key', key).send({ amount: 1 });

/** The permanent 500 as the client sees it: its code, no Retry-After, nothing to retry. */
function expectPermanent(response: request.Response): void {
  expect(response.status).toBe(500);
  expect(response.headers['retry-after']).toBeUndefined();
  expect(response.headers['content-type']).toMatch('application/problem+json');
  expect(response.body).toEqual({
    type: 'urn:idempotency:database_permanent',
    title: 'Permanent database error',
    status: 500,
    detail: PERMANENT_DETAIL,
    code: 'database_permanent',
  });
}

describe('the start-up check of the schema', () => {
  let database: TestDatabase;
  beforeEach(async () => {
    database = await createTestDatabase('schema_check');
  });
  afterEach(() => database?.drop());

  it('refuses to start on a database without the migrations, naming each table and its migration', async () => {
    const error = await startFailure(database.url);
    expect((error as Error).name).toBe('IdempotencySchemaMissingError');
    expect((error as Error).message).toBe(
      lacking(
        'table idempotency_keys is missing (migration CreateIdempotencyKeys1764460800000)',
        'table processed_messages is missing (migration CreateProcessedMessages1764460900000)',
        'table message_failures is missing (migration CreateMessageFailures1764461400000)',
      ),
    );
  });

  it('refuses to start with largeResponses when only the bodies table is missing', async () => {
    await migrate(
      database.url,
      IDEMPOTENCY_MIGRATIONS.filter((migration) => migration !== CreateResponseBodies1764461500000),
    );
    // Without the option, the bodies table is not needed: the app starts.
    expect(await startFailure(database.url)).toBeUndefined();
    const error = await startFailure(database.url, { largeResponses: { overBytes: 1024 } });
    expect((error as Error).message).toBe(
      lacking(
        'table idempotency_response_bodies is missing (migration CreateResponseBodies1764461500000)',
      ),
    );
  });

  it('refuses to start on an outdated schema, naming the migration that did not run', async () => {
    await migrate(database.url, IDEMPOTENCY_MIGRATIONS);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query('ALTER TABLE idempotency_keys DROP COLUMN finished_at');
    await db.end();
    const error = await startFailure(database.url);
    expect((error as Error).message).toBe(
      lacking(
        'column idempotency_keys.finished_at is missing (migration AddFinishedAt1764461200000)',
      ),
    );
  });

  it('refuses to start before AddLeasedAt, naming it (every takeover writes leased_at)', async () => {
    await migrate(database.url, IDEMPOTENCY_MIGRATIONS);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query('ALTER TABLE idempotency_keys DROP COLUMN leased_at');
    await db.end();
    const error = await startFailure(database.url);
    expect((error as Error).message).toBe(
      lacking('column idempotency_keys.leased_at is missing (migration AddLeasedAt1764461700000)'),
    );
  });

  it('refuses partitionedExpiry on a plain table, and a partitioned table without it', async () => {
    await migrate(database.url, IDEMPOTENCY_MIGRATIONS);
    const plain = await startFailure(database.url, { partitionedExpiry: true });
    expect((plain as Error).message).toBe(
      lackingLayout(
        'column idempotency_keys.placed_at is missing (migration PartitionIdempotencyKeys1764461600000)',
        'partitionedExpiry is on, but idempotency_keys is not partitioned: run the ' +
          'PartitionIdempotencyKeys1764461600000 migration (see the README\'s "Partitioned expiry")',
      ),
    );
    await migrate(database.url, [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000]);
    expect(await startFailure(database.url, { partitionedExpiry: true })).toBeUndefined();
    const partitioned = await startFailure(database.url);
    expect((partitioned as Error).message).toBe(
      lacking(
        'idempotency_keys is partitioned (the PartitionIdempotencyKeys migration ran), but ' +
          'partitionedExpiry is off: turn it on in IdempotencyModule.forRoot(), or revert that migration',
      ),
    );
  });

  it.each<[string, string, string[]]>([
    [
      'a keys table without its (tenant_id, key) primary key',
      'ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey',
      [
        'idempotency_keys has no primary key or unique index on (tenant_id, key), which the ' +
          "library's ON CONFLICT needs (migration CreateIdempotencyKeys1764460800000)",
      ],
    ],
    [
      'claim_id without its DEFAULT',
      'ALTER TABLE idempotency_keys ALTER COLUMN claim_id DROP DEFAULT',
      [
        'column idempotency_keys.claim_id has no DEFAULT, which the insert needs ' +
          '(migration CreateIdempotencyKeys1764460800000)',
      ],
    ],
    [
      'processed_messages without its primary key, and a default dropped',
      'ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_pkey; ' +
        'ALTER TABLE message_failures ALTER COLUMN last_failed_at DROP DEFAULT',
      [
        'processed_messages has no primary key or unique index on (consumer, message_id), ' +
          "which the library's ON CONFLICT needs (migration CreateProcessedMessages1764460900000)",
        'column message_failures.last_failed_at has no DEFAULT, which the insert needs ' +
          '(migration CreateMessageFailures1764461400000)',
      ],
    ],
  ])('refuses to start on %s, naming what is missing', async (_name, ddl, problems) => {
    await migrate(database.url, IDEMPOTENCY_MIGRATIONS);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(ddl);
    await db.end();
    const error = await startFailure(database.url);
    expect((error as Error).message).toBe(lacking(...problems));
  });

  it('refuses to start on the partition functions of an earlier PartitionIdempotencyKeys, naming PinPartitionFunctions (adversary 108)', async () => {
    await migrate(database.url, [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000]);
    expect(await startFailure(database.url, { partitionedExpiry: true })).toBeUndefined();
    const db = new Client({ connectionString: database.url });
    await db.connect();
    // As that migration made them: no settings of their own.
    await db.query('ALTER FUNCTION idempotency_key_partitions() RESET ALL');
    await db.query('ALTER FUNCTION idempotency_keys_create_partitions(bigint, int) RESET ALL');
    await db.end();
    const error = await startFailure(database.url, { partitionedExpiry: true });
    expect((error as Error).message).toBe(
      lackingLayout(
        "function idempotency_keys_create_partitions() reads partition bounds in the session's " +
          'DateStyle and TimeZone (migration PinPartitionFunctions1764461800000)',
        "function idempotency_key_partitions() reads partition bounds in the session's " +
          'DateStyle and TimeZone (migration PinPartitionFunctions1764461800000)',
      ),
    );
  });

  it('refuses to start on a partitioned keys table with a DEFAULT partition, saying how to move its keys out and drop it (adversary 108, 109)', async () => {
    await migrate(database.url, [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000]);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query('CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT');
    await db.end();
    const error = await startFailure(database.url, { partitionedExpiry: true });
    expect((error as Error).message).toBe(
      "IdempotencyModule: the app's database lacks what the library needs:\n" +
        `- ${defaultPartitionProblem('public.idempotency_keys_default', 'public')}\n`,
    );
  });

  it('refuses to start on a partitioned keys table whose claim_id lost its DEFAULT', async () => {
    await migrate(database.url, [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000]);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query('ALTER TABLE idempotency_keys ALTER COLUMN claim_id DROP DEFAULT');
    await db.end();
    const error = await startFailure(database.url, { partitionedExpiry: true });
    expect((error as Error).message).toBe(
      lacking(
        'column idempotency_keys.claim_id has no DEFAULT, which the insert needs ' +
          '(migration CreateIdempotencyKeys1764460800000)',
      ),
    );
  });

  it('refuses to start when the database reads strings with standard_conforming_strings off, saying how to turn it on', async () => {
    await migrate(database.url, IDEMPOTENCY_MIGRATIONS);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(`ALTER DATABASE ${database.name} SET standard_conforming_strings = off`);
    await db.end();
    const error = await startFailure(database.url);
    expect((error as Error).name).toBe('StandardConformingStringsOffError');
    expect((error as Error).message).toMatch(
      /^IdempotencyModule: standard_conforming_strings is off .* ALTER DATABASE <name> RESET standard_conforming_strings/,
    );
    const reset = new Client({ connectionString: database.url });
    await reset.connect();
    await reset.query(`ALTER DATABASE ${database.name} RESET standard_conforming_strings`);
    await reset.end();
    expect(await startFailure(database.url)).toBeUndefined();
  });

  it('refuses to start as a role that may only read the tables, naming the GRANT to run', async () => {
    await migrate(database.url, IDEMPOTENCY_MIGRATIONS);
    const role = `idem_reader_${randomBytes(3).toString('hex')}`;
    const db = new Client({ connectionString: database.url });
    await db.connect();
    try {
      await db.query(`CREATE ROLE ${role} LOGIN PASSWORD 'reader'`);
      await db.query(`GRANT CONNECT ON DATABASE ${database.name} TO ${role}`);
      await db.query(`GRANT USAGE ON SCHEMA public TO ${role}`);
      await db.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${role}`);
      const url = new URL(database.url);
      url.username = role;
      url.password = 'reader';
      const error = await startFailure(url.toString());
      expect((error as Error).message).toBe(
        "IdempotencyModule: the app's database lacks what the library needs:\n" +
          ['idempotency_keys', 'processed_messages', 'message_failures']
            .map(
              (table) =>
                `- the role ${role} may not INSERT, UPDATE, DELETE on ${table}: ` +
                `GRANT SELECT, INSERT, UPDATE, DELETE ON ${table} TO ${role}\n`,
            )
            .join(''),
      );
      // Granted: it starts.
      await db.query(
        `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${role}`,
      );
      expect(await startFailure(url.toString())).toBeUndefined();
    } finally {
      await db.query(`DROP OWNED BY ${role}`);
      await db.end();
      const admin = new Client({ connectionString: adminUrl() });
      await admin.connect();
      await admin.query(`DROP ROLE IF EXISTS ${role}`);
      await admin.end();
    }
  });

  // The tables in a schema the role's search_path names: PostgreSQL leaves a schema the role
  // may not use out of the path, so the tables look missing to it, but the migrations ran.
  it.each<{
    path: string;
    /** The schema as SQL writes it, given the role's name. */
    schema: (role: string) => string;
    /** The role's search_path setting as SQL writes it; or the connection's `options`. */
    setting: { role: string } | { options: string };
    /** The schema as the message names it. */
    shown: (role: string) => string;
  }>([
    {
      path: 'idem, public',
      schema: () => 'idem',
      setting: { role: 'idem, public' },
      shown: () => 'idem',
    },
    {
      path: '"$user", public (a schema named as the role)',
      schema: (role) => role,
      setting: { role: '"$user", public' },
      shown: (role) => role,
    },
    {
      path: 'public, "Idem Keys" (quoted)',
      schema: () => '"Idem Keys"',
      setting: { role: 'public, "Idem Keys"' },
      shown: () => 'Idem Keys',
    },
    {
      path: 'IDEM,public (unquoted capitals, in the connection options)',
      schema: () => 'idem',
      setting: { options: '-c search_path=IDEM,public' },
      shown: () => 'idem',
    },
  ])(
    'refuses to start as a role without USAGE on the schema of the tables (search_path $path), naming the GRANT, not the migrations',
    async ({ schema: schemaOf, setting, shown }) => {
      const role = `idem_nousage_${randomBytes(3).toString('hex')}`;
      const schema = schemaOf(role);
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
        if ('role' in setting) {
          await db.query(
            `ALTER ROLE ${role} IN DATABASE ${database.name} SET search_path = ${setting.role}`,
          );
        }
        await db.query(
          `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${schema} TO ${role}`,
        );
        const url = new URL(database.url);
        url.username = role;
        url.password = 'nousage';
        if ('options' in setting) url.searchParams.set('options', setting.options);
        const error = await startFailure(url.toString());
        const grant = `GRANT USAGE ON SCHEMA ${schema} TO ${role}`;
        expect((error as Error).name).toBe('IdempotencySchemaMissingError');
        expect((error as Error).message).toBe(
          "IdempotencyModule: the app's database lacks what the library needs:\n" +
            `- the role ${role} may not use schema ${shown(role)}, which holds idempotency_keys, ` +
            `processed_messages, message_failures: ${grant}\n`,
        );
        // The GRANT it names: it starts.
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

  it('starts on a database with every migration', async () => {
    await migrate(database.url, IDEMPOTENCY_MIGRATIONS);
    expect(await startFailure(database.url, { largeResponses: { overBytes: 1024 } })).toBe(
      undefined,
    );
  });
});

describe.each(ADAPTERS)('permanent database errors on %s', (adapter) => {
  describe('a database down at start-up', () => {
    let database: TestDatabase;
    let proxy: TcpProxy;
    let app: INestApplication;

    beforeAll(async () => {
      database = await createTestDatabase(`schema_down_${adapter}`);
      const target = new URL(database.url);
      proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
      await proxy.start();
      const viaProxy = new URL(database.url);
      viaProxy.hostname = '127.0.0.1';
      viaProxy.port = String(proxy.port);
      // TypeORM connects, then the database goes away before the module's check.
      app = await startApp(viaProxy.toString(), adapter, {}, () => proxy.refuse());
      Logger.overrideLogger(capture);
    }, 60_000);
    afterAll(async () => {
      Logger.overrideLogger(false);
      await app?.close();
      await proxy?.stop();
      await database?.drop();
    });

    it('starts, checks on first contact, answers the permanent 500 until migrated, then works', async () => {
      // Still down: the outage's own 503, to retry.
      const down = await pay(app, 'first-contact');
      expect(down.status).toBe(503);
      expect(down.body.code).toBe('store_unavailable');
      expect(down.headers['retry-after']).toBe('1');

      await proxy.restore();
      errors.length = 0;
      expectPermanent(await pay(app, 'first-contact'));
      expectPermanent(await pay(app, 'first-contact'));
      // The check said what is missing, where operators look, before any statement ran.
      const message = lacking(
        'table idempotency_keys is missing (migration CreateIdempotencyKeys1764460800000)',
        'table processed_messages is missing (migration CreateProcessedMessages1764460900000)',
        'table message_failures is missing (migration CreateMessageFailures1764461400000)',
      );
      expect(errors.filter((line) => line === message)).toHaveLength(2);
      expect(errors.filter((line) => line.includes('does not exist'))).toEqual([]);

      // Migrated without a restart: the check runs again, passes, and the key works.
      await migrate(database.url, IDEMPOTENCY_MIGRATIONS);
      const created = await pay(app, 'first-contact');
      expect(created.status).toBe(201);
      const replayed = await pay(app, 'first-contact');
      expect(replayed.status).toBe(201);
      expect(replayed.headers['idempotent-replayed']).toBe('true');
    });
  });

  describe('on a migrated database', () => {
    let database: TestDatabase;
    let db: Client;
    const role = `idem_limited_${adapter}_${randomBytes(3).toString('hex')}`;

    beforeAll(async () => {
      database = await createTestDatabase(`schema_runtime_${adapter}`);
      await migrate(database.url, IDEMPOTENCY_MIGRATIONS);
      db = new Client({ connectionString: database.url });
      await db.connect();
    });
    afterAll(async () => {
      await db?.end();
      await database?.drop();
      const admin = new Client({ connectionString: adminUrl() });
      await admin.connect();
      await admin.query(`DROP ROLE IF EXISTS ${role}`);
      await admin.end();
    });

    it('answers 500 database_permanent without Retry-After once the keys table is dropped', async () => {
      const app = await startApp(database.url, adapter);
      try {
        expect((await pay(app, 'before-drop')).status).toBe(201);
        await db.query('ALTER TABLE idempotency_keys RENAME TO idempotency_keys_gone');
        expectPermanent(await pay(app, 'after-drop'));
        expectPermanent(await pay(app, 'before-drop-retry'));
      } finally {
        await db.query('ALTER TABLE idempotency_keys_gone RENAME TO idempotency_keys');
        await app.close();
      }
    });

    it.each([
      [
        'claim_id loses its DEFAULT (23502)',
        'ALTER TABLE idempotency_keys ALTER COLUMN claim_id DROP DEFAULT',
        'ALTER TABLE idempotency_keys ALTER COLUMN claim_id SET DEFAULT gen_random_uuid()',
        /claim_id.*not-null|null value in column "claim_id"/,
      ],
      [
        'the keys table loses its primary key (42P10)',
        'ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey',
        'ALTER TABLE idempotency_keys ADD PRIMARY KEY (tenant_id, key)',
        /no primary key or unique index on \(tenant_id, key\)/,
      ],
    ])(
      'answers 500 database_permanent, not a 503 to retry, once %s after start-up',
      async (name, breakIt, repair, logged) => {
        const key = `${adapter}-${name.replace(/\W+/g, '-')}`;
        const app = await startApp(database.url, adapter);
        Logger.overrideLogger(capture);
        errors.length = 0;
        try {
          await db.query(breakIt);
          expectPermanent(await pay(app, key));
          expectPermanent(await pay(app, key));
          expect(errors.some((line) => logged.test(line))).toBe(true);
          expect(errors.filter((line) => line.includes('is partitioned'))).toEqual([]);
        } finally {
          Logger.overrideLogger(false);
          await db.query(repair);
          await app.close();
        }
      },
    );

    it('answers 500 database_permanent to a role whose rights on the tables were revoked after start-up', async () => {
      // Without them at start-up the app does not start (see the start-up check's tests).
      await db.query(`CREATE ROLE ${role} LOGIN PASSWORD 'limited'`);
      await db.query(`GRANT CONNECT ON DATABASE ${database.name} TO ${role}`);
      await db.query(`GRANT USAGE ON SCHEMA public TO ${role}`);
      const grant = `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${role}`;
      await db.query(grant);
      const url = new URL(database.url);
      url.username = role;
      url.password = 'limited';
      const app = await startApp(url.toString(), adapter);
      try {
        await db.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${role}`);
        expectPermanent(await pay(app, 'no-rights'));
        // Granted: the same key works, nothing was stored for it.
        await db.query(grant);
        expect((await pay(app, 'no-rights')).status).toBe(201);
      } finally {
        await app.close();
        await db.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${role}`);
        await db.query(`REVOKE ALL ON SCHEMA public FROM ${role}`);
        await db.query(`REVOKE ALL ON DATABASE ${database.name} FROM ${role}`);
      }
    });

    it('answers 500 database_permanent when the app’s database is read-only on a primary', async () => {
      await db.query(`ALTER DATABASE ${database.name} SET default_transaction_read_only = on`);
      // Sessions opened from now on are read-only: the app's.
      const app = await startApp(database.url, adapter);
      try {
        expectPermanent(await pay(app, 'read-only'));
      } finally {
        await app.close();
        await db.query(`ALTER DATABASE ${database.name} RESET default_transaction_read_only`);
      }
    });
  });
});

/**
 * A primary made read-only by its server configuration, as pg_auto_failover fences a standby it
 * promotes (`ALTER SYSTEM SET default_transaction_read_only = on`, lifted once the old primary
 * is demoted): it becomes writable by itself, so it stays a 503 to retry. On a PostgreSQL of the
 * test's own, since ALTER SYSTEM reaches every database of a server.
 */
describe('a primary fenced read-only by its server configuration (a failover in progress)', () => {
  let server: Awaited<ReturnType<typeof startEmbeddedPostgres>>;
  let admin: Client;
  beforeAll(async () => {
    server = await startEmbeddedPostgres();
    await migrate(server.url, IDEMPOTENCY_MIGRATIONS);
    admin = new Client({ connectionString: server.url });
    await admin.connect();
  }, 120_000);
  afterAll(async () => {
    await admin?.end();
    await server?.stop();
  });

  it.each(ADAPTERS)(
    'stays 503 with Retry-After on %s, and the key works once it is lifted',
    async (adapter) => {
      const app = await startApp(server.url, adapter);
      const key = `fenced-${adapter}`;
      try {
        await admin.query('ALTER SYSTEM SET default_transaction_read_only = on');
        await admin.query('SELECT pg_reload_conf()');
        // Probed with keys of their own: one answered before the reload would be stored.
        let probe = 0;
        const probed = async (status: number) => {
          const answer = await pay(app, `${key}-probe-${probe++}`);
          return answer.status === status;
        };
        await until(() => probed(503), 'the reloaded setting to reach the app’s sessions', 10_000);
        const fenced = await pay(app, key);
        expect(fenced.status).toBe(503);
        expect(fenced.headers['retry-after']).toBe('1');
        expect(fenced.body.code).toBe('store_unavailable');

        await admin.query('ALTER SYSTEM RESET default_transaction_read_only');
        await admin.query('SELECT pg_reload_conf()');
        await until(() => probed(201), 'the lifted setting to reach the app’s sessions', 10_000);
        // Nothing was stored for the key while fenced: it runs now, then replays.
        expect((await pay(app, key)).status).toBe(201);
        const replayed = await pay(app, key);
        expect(replayed.headers['idempotent-replayed']).toBe('true');
      } finally {
        await admin.query('ALTER SYSTEM RESET default_transaction_read_only');
        await admin.query('SELECT pg_reload_conf()');
        await app.close();
      }
    },
    60_000,
  );
});

onRabbitMq('a RabbitMQ consumer whose tables are missing', () => {
  let database: TestDatabase;
  let connection: amqplib.ChannelModel;
  let channel: amqplib.Channel;
  let worker: WorkerProcess;
  const queue = `idem-schema-${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    database = await createTestDatabase('schema_consumer');
    connection = await amqplib.connect(RABBITMQ_URL);
    channel = await connection.createChannel();
    await channel.assertQueue(`${queue}.dead`, { durable: false });
    // The worker migrates at start-up (its check passes); the tables go once it runs, as a
    // forgotten migration leaves them.
    worker = await startWorker('test/support/message-worker.js', {
      DATABASE_URL: database.url,
      TRANSPORT: 'rmq',
      QUEUE: queue,
      WORKER: 'schema',
      MAX_ATTEMPTS: '5',
      SETTLEMENTS: '1',
    });
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query('DROP TABLE message_failures');
    await db.query('DROP TABLE processed_messages');
    await db.end();
  }, 60_000);
  afterAll(async () => {
    await worker?.kill();
    await channel?.deleteQueue(queue);
    await channel?.deleteQueue(`${queue}.dead`);
    await connection?.close();
    await database?.drop();
  });

  it('refuses to start at all when its migrations were forgotten, saying which', async () => {
    const empty = await createTestDatabase('schema_consumer_empty');
    try {
      const started = await startWorker('test/support/message-worker.js', {
        DATABASE_URL: empty.url,
        TRANSPORT: 'rmq',
        QUEUE: `${queue}-unmigrated`,
        MIGRATE: '0',
      }).then(
        async (running) => {
          await running.kill();
          return 'started';
        },
        (error: Error) => error.message,
      );
      expect(started).toContain(
        'IdempotencySchemaMissingError: ' +
          lacking(
            'table idempotency_keys is missing (migration CreateIdempotencyKeys1764460800000)',
            'table processed_messages is missing (migration CreateProcessedMessages1764460900000)',
            'table message_failures is missing (migration CreateMessageFailures1764461400000)',
          ),
      );
    } finally {
      await empty.drop();
    }
  }, 60_000);

  it('gives the message up to the dead letters after maxAttempts deliveries', async () => {
    const account = `schema-${randomBytes(3).toString('hex')}`;
    const started = Date.now();
    channel.sendToQueue(
      queue,
      Buffer.from(JSON.stringify({ pattern: 'settlement.created', data: { account, amount: 1 } })),
      { messageId: `m-${account}` },
    );
    let deadLettered = false;
    await until(
      async () => {
        const message = await channel.get(`${queue}.dead`, { noAck: true });
        if (message !== false) deadLettered = true;
        return deadLettered;
      },
      `${account}'s dead letter`,
      20_000,
    ).catch(() => undefined);
    const deliveries = [...worker.output().matchAll(/^settled (\S+) (\w+)$/gm)]
      .filter(([, which]) => which === account)
      .map(([, , outcome]) => outcome);
    expect({ deadLettered, deliveries }).toEqual({
      deadLettered: true,
      deliveries: ['requeue', 'requeue', 'requeue', 'requeue', 'reject'],
    });
    // Bounded in time too: four backoffs (0.1 + 0.2 + 0.4 + 0.8 s), not a loop.
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(worker.output()).toContain(`gave up message m-${account} after 5 failed deliveries`);
  }, 30_000);
});
