import { Controller, Get, type INestApplication, Module } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IdempotencyHealthIndicator } from '../lib/health/index.js';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule } from '../lib/index.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { ADAPTERS, bootstrapTestApp } from './support/bootstrap.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { adminUrl, createTestDatabase, type TestDatabase } from './support/database.js';
import { TcpProxy } from './support/tcp-proxy.js';

/**
 * The store's health indicator in a Nest app with `@nestjs/terminus`'s HealthCheckService, on
 * real PostgreSQL: healthy, the store down (a proxy cut), its table missing, an old unfinished
 * key, write privileges or the schema's USAGE revoked. Terminus answers 503 when an indicator is down.
 */

const MAX_UNFINISHED_AGE_MS = 60_000;

@Controller()
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly idempotency: IdempotencyHealthIndicator,
  ) {}

  @Get('health')
  @HealthCheck()
  check() {
    return this.health.check([
      () =>
        this.idempotency.isHealthy('idempotency', { maxUnfinishedAgeMs: MAX_UNFINISHED_AGE_MS }),
    ]);
  }
}

function healthModule(url: string) {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, retryAttempts: 0 }),
      IdempotencyModule.forRoot({ tenant: () => '1', databaseTimeoutMs: 2_000 }),
      TerminusModule.forRoot({ logger: false }),
    ],
    controllers: [HealthController],
    providers: [IdempotencyHealthIndicator],
  })
  class HealthAppModule {}
  return HealthAppModule;
}

const up = (oldestUnfinishedAgeMs: number | null) => ({
  status: 'ok',
  info: { idempotency: { status: 'up', oldestUnfinishedAgeMs } },
  error: {},
  details: { idempotency: { status: 'up', oldestUnfinishedAgeMs } },
});

const down = (idempotency: Record<string, unknown>) => ({
  status: 'error',
  info: {},
  error: { idempotency: { status: 'down', ...idempotency } },
  details: { idempotency: { status: 'down', ...idempotency } },
});

describe.each(ADAPTERS)('IdempotencyHealthIndicator (%s)', (adapter) => {
  let database: MigratedDatabase;
  let proxy: TcpProxy;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createMigratedDatabase(`health_${adapter}`);
    const url = new URL(database.url);
    proxy = new TcpProxy(url.hostname, Number(url.port || 5432));
    await proxy.start();
    url.port = String(proxy.port);
    app = await bootstrapTestApp(healthModule(url.toString()), adapter);
  });
  afterAll(async () => {
    await app?.close();
    await proxy?.stop();
    await database?.drop();
  });

  it('healthy: 200, no key unfinished', async () => {
    const response = await request(app.getHttpServer()).get('/health');
    expect(response.status).toBe(200);
    expect(response.body).toEqual(up(null));
  });

  it('an unfinished key within the bound is up; one older than it is 503', async () => {
    await database.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, created_at, locked_until)
       VALUES ('1', 'recent', '\\x00', now() - interval '10 seconds', now())`,
    );
    const recent = await request(app.getHttpServer()).get('/health');
    expect(recent.status).toBe(200);
    expect(recent.body.info.idempotency.oldestUnfinishedAgeMs).toBeGreaterThanOrEqual(10_000);
    expect(recent.body.info.idempotency.oldestUnfinishedAgeMs).toBeLessThan(MAX_UNFINISHED_AGE_MS);

    await database.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, created_at, locked_until)
       VALUES ('1', 'old', '\\x00', now() - interval '2 minutes', now() - interval '1 minute')`,
    );
    try {
      const old = await request(app.getHttpServer()).get('/health');
      expect(old.status).toBe(503);
      const age = old.body.error.idempotency.oldestUnfinishedAgeMs as number;
      expect(age).toBeGreaterThanOrEqual(120_000);
      expect(old.body).toEqual(
        down({
          message:
            'a key has been unfinished for longer than 60000 ms (maxUnfinishedAgeMs): its ' +
            'lease ran out and no retry took it over: its worker died',
          oldestUnfinishedAgeMs: age,
          maxUnfinishedAgeMs: MAX_UNFINISHED_AGE_MS,
        }),
      );
    } finally {
      await database.dataSource.query(`DELETE FROM idempotency_keys`);
    }
    const after = await request(app.getHttpServer()).get('/health');
    expect(after.status).toBe(200);
  });

  it('a key given back on purpose (a 503 to retry, never retried) is no dead worker: up', async () => {
    // As RELEASE leaves a key it keeps (a phase done, or its claim id handed out): no lease.
    await database.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, created_at, locked_until,
         recovery_point, lock_version)
       VALUES ('1', 'given-back', '\\x00', now() - interval '2 minutes', NULL, 'charged', 1)`,
    );
    try {
      const response = await request(app.getHttpServer()).get('/health');
      expect(response.status).toBe(200);
      expect(response.body).toEqual(up(null));
    } finally {
      await database.dataSource.query(`DELETE FROM idempotency_keys`);
    }
  });

  it('a key resumed by its retry long after a 503 is aged from the takeover, not its claim', async () => {
    // Given back two minutes ago (a 503, a job between its steps), taken over by the retry now.
    const [{ claim_id: claimId }] = (await database.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, created_at, locked_until,
         recovery_point, lock_version)
       VALUES ('1', 'resumed', '\\x00', now() - interval '2 minutes', NULL, 'charged', 1)
       RETURNING claim_id`,
    )) as { claim_id: string }[];
    const store = new PostgresClaimStore(new IdempotencyDatabase(() => database.dataSource, 5000));
    try {
      const claim = await store.takeOver(
        { tenantId: '1', key: 'resumed' },
        { lockVersion: '1', claimId },
        30_000,
      );
      expect(claim).toBeDefined();
      const response = await request(app.getHttpServer()).get('/health');
      expect(response.status).toBe(200);
      expect(response.body.info.idempotency.oldestUnfinishedAgeMs).toBeLessThan(10_000);
      expect(await store.oldestUnfinishedAgeMs()).toBeLessThan(10_000);

      // The hold itself past the bound (taken over two minutes ago, renewed since): it hangs.
      await database.dataSource.query(
        `UPDATE idempotency_keys SET leased_at = now() - interval '2 minutes' WHERE key = 'resumed'`,
      );
      const hangs = await request(app.getHttpServer()).get('/health');
      expect(hangs.status).toBe(503);
      expect(hangs.body.error.idempotency.message).toBe(
        'a key has been unfinished for longer than 60000 ms (maxUnfinishedAgeMs): its lease is ' +
          'still renewed: its work hangs',
      );
      expect(await store.oldestUnfinishedAgeMs()).toBeGreaterThanOrEqual(120_000);
    } finally {
      await database.dataSource.query(`DELETE FROM idempotency_keys`);
    }
  });

  it('a key held past the bound under a lease still renewed: 503, its work hangs', async () => {
    await database.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, created_at, locked_until)
       VALUES ('1', 'hangs', '\\x00', now() - interval '2 minutes', now() + interval '30 seconds')`,
    );
    try {
      const response = await request(app.getHttpServer()).get('/health');
      expect(response.status).toBe(503);
      expect(response.body.error.idempotency.message).toBe(
        'a key has been unfinished for longer than 60000 ms (maxUnfinishedAgeMs): its lease is ' +
          'still renewed: its work hangs',
      );
    } finally {
      await database.dataSource.query(`DELETE FROM idempotency_keys`);
    }
  });

  it('the store down: 503 saying so, and 200 once it is back', async () => {
    await proxy.refuse();
    try {
      const response = await request(app.getHttpServer()).get('/health');
      expect(response.status).toBe(503);
      expect(response.body).toEqual(
        down({ message: 'the idempotency store is unreachable', error: expect.any(String) }),
      );
    } finally {
      await proxy.restore();
    }
    const back = await request(app.getHttpServer()).get('/health');
    expect(back.status).toBe(200);
    expect(back.body).toEqual(up(null));
  });
});

/**
 * An app whose database lacks the tables does not start (the start-up schema check); a table
 * that goes missing while the app runs (a restore gone wrong, a migration rolled back) is what
 * the indicator then reports.
 */
describe.each(ADAPTERS)(
  'IdempotencyHealthIndicator, the table gone at run time (%s)',
  (adapter) => {
    let database: MigratedDatabase;
    let app: INestApplication;

    beforeAll(async () => {
      database = await createMigratedDatabase(`health_gone_${adapter}`);
      app = await bootstrapTestApp(healthModule(database.url), adapter);
    });
    afterAll(async () => {
      await app?.close();
      await database?.drop();
    });

    it('the table missing: 503 naming the migrations', async () => {
      expect((await request(app.getHttpServer()).get('/health')).status).toBe(200);
      const admin = new Client({ connectionString: database.url });
      await admin.connect();
      await admin.query('ALTER TABLE idempotency_keys RENAME TO idempotency_keys_gone');
      await admin.end();
      const response = await request(app.getHttpServer()).get('/health');
      expect(response.status).toBe(503);
      expect(response.body).toEqual(
        down({
          message:
            "table idempotency_keys is missing: run the library's migrations (on a pg.Pool: " +
            "migrations/schema.sql; on TypeORM: IDEMPOTENCY_MIGRATIONS in the DataSource's " +
            'migrations)',
        }),
      );
    });
  },
);

/** A role that may read the keys table and no longer write it: every keyed request would fail. */
describe.each(ADAPTERS)('IdempotencyHealthIndicator, write privileges revoked (%s)', (adapter) => {
  let database: MigratedDatabase;
  let app: INestApplication;
  let admin: Client;
  const role = `idem_health_${adapter}_${Date.now() % 100000}`;

  beforeAll(async () => {
    database = await createMigratedDatabase(`health_grants_${adapter}`);
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    const name = new URL(database.url).pathname.slice(1);
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'health'`);
    await admin.query(`GRANT CONNECT ON DATABASE ${name} TO ${role}`);
    await admin.query(`GRANT USAGE ON SCHEMA public TO ${role}`);
    await admin.query(
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${role}`,
    );
    const url = new URL(database.url);
    url.username = role;
    url.password = 'health';
    app = await bootstrapTestApp(healthModule(url.toString()), adapter);
  });
  afterAll(async () => {
    await app?.close();
    await admin?.query(`DROP OWNED BY ${role}`);
    await admin?.end();
    await database?.drop();
    const server = new Client({ connectionString: adminUrl() });
    await server.connect();
    await server.query(`DROP ROLE IF EXISTS ${role}`);
    await server.end();
  });

  it('503 naming the GRANT to run, and 200 once granted again', async () => {
    expect((await request(app.getHttpServer()).get('/health')).status).toBe(200);
    await admin.query(`REVOKE INSERT, UPDATE, DELETE ON idempotency_keys FROM ${role}`);
    const response = await request(app.getHttpServer()).get('/health');
    expect(response.status).toBe(503);
    expect(response.body).toEqual(
      down({
        message:
          `the role ${role} may not INSERT, UPDATE, DELETE on idempotency_keys: ` +
          `GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO ${role}`,
      }),
    );
    await admin.query(`GRANT INSERT, UPDATE, DELETE ON idempotency_keys TO ${role}`);
    expect((await request(app.getHttpServer()).get('/health')).status).toBe(200);
  });
});

/**
 * The tables in a schema of the role's search_path that the role may no longer use: PostgreSQL
 * leaves the schema out of the path, the table looks missing, but the migrations ran: the
 * GRANT USAGE is what to run.
 */
describe.each(ADAPTERS)('IdempotencyHealthIndicator, schema USAGE revoked (%s)', (adapter) => {
  let database: TestDatabase;
  let app: INestApplication;
  let admin: Client;
  const role = `idem_usage_${adapter}_${Date.now() % 100000}`;

  beforeAll(async () => {
    database = await createTestDatabase(`health_usage_${adapter}`);
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query('CREATE SCHEMA idem');
    const inIdem = new URL(database.url);
    inIdem.searchParams.set('options', '-c search_path=idem');
    const migrator = new DataSource({
      type: 'postgres',
      url: inIdem.toString(),
      migrations: IDEMPOTENCY_MIGRATIONS,
    });
    await migrator.initialize();
    await migrator.runMigrations();
    await migrator.destroy();
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'health'`);
    await admin.query(`GRANT CONNECT ON DATABASE ${database.name} TO ${role}`);
    await admin.query(`ALTER ROLE ${role} IN DATABASE ${database.name} SET search_path = idem`);
    await admin.query(`GRANT USAGE ON SCHEMA idem TO ${role}`);
    await admin.query(
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA idem TO ${role}`,
    );
    const url = new URL(database.url);
    url.username = role;
    url.password = 'health';
    app = await bootstrapTestApp(healthModule(url.toString()), adapter);
  });
  afterAll(async () => {
    await app?.close();
    await admin?.query(`DROP OWNED BY ${role}`);
    await admin?.end();
    await database?.drop();
    const server = new Client({ connectionString: adminUrl() });
    await server.connect();
    await server.query(`DROP ROLE IF EXISTS ${role}`);
    await server.end();
  });

  it('503 naming the GRANT USAGE to run, not the migrations, and 200 once granted again', async () => {
    expect((await request(app.getHttpServer()).get('/health')).status).toBe(200);
    await admin.query(`REVOKE USAGE ON SCHEMA idem FROM ${role}`);
    const response = await request(app.getHttpServer()).get('/health');
    expect(response.status).toBe(503);
    expect(response.body).toEqual(
      down({
        message:
          `the role ${role} may not use schema idem, which holds idempotency_keys: ` +
          `GRANT USAGE ON SCHEMA idem TO ${role}`,
      }),
    );
    await admin.query(`GRANT USAGE ON SCHEMA idem TO ${role}`);
    expect((await request(app.getHttpServer()).get('/health')).status).toBe(200);
  });
});
