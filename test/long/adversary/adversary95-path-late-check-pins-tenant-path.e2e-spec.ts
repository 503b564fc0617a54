/**
 * Fixed (session of 2026-12-06 fifth): the start-up check (lib/idempotency-schema.check.ts) no
 * longer pins the text of the connection's current `search_path`: it reads the path sessions
 * START with (`reset_val` in pg_settings) and the login role (`session_user`), resolves it with
 * the pure `resolvedLibraryPath` (lib/connection/library-path.ts: `$user` expanded, schemas that
 * exist, each quoted), and runs its catalog query under that pinned path, so what it checks is
 * what the library's statements will find. A connection found on another path is logged.
 */
/**
 * Adversary 95 (path): the search path the library pins for all its statements (f28c8ec) is
 * read by the start-up check on whatever pooled connection it gets. When the database is down
 * at start-up the check runs late, before the library's first statement (as
 * lib/idempotency-schema.check.ts says), on a connection of the app's pool that the app's own
 * code may have used first: the schema-per-tenant recipe's `SET search_path TO tenant_x`, left
 * on a runner given back without a reset (the recipe the docs now call safe). The check finds
 * tenant_x's copy of the library's tables (a tenant made by running every migration in its
 * schema), passes, and pins `tenant_x` for the life of the process: every key of this
 * instance, the tenant's or not, is claimed and stored in tenant_x.idempotency_keys, while
 * every instance started while the database was up (or this one after a restart) uses
 * public's. A retry that reaches another instance runs the handler again. Before the fix, a
 * dirty connection misrouted the one request that met it; now it misroutes all of them. No
 * outage is needed either: a start-up step of the app's own in a module's `onModuleInit`
 * (walking its tenants, each with `SET search_path TO tenant_…` on a runner: how a tenant's
 * copy of the tables is made), which Nest runs before the check's `onApplicationBootstrap`,
 * leaves the pool's connection where the check then reads its path.
 *
 * User code (adversary 93's, started during an outage):
 *
 *   @Post('tenant') async tenantWork(@Headers('x-tenant') t) {
 *     const runner = this.dataSource.createQueryRunner(); await runner.connect();
 *     await runner.query(`SET search_path TO tenant_${t}`); …; await runner.release(); // no RESET
 *   }
 *   @Post('pay') @Idempotent() async pay(@Body() b) {
 *     await this.dataSource.query('INSERT INTO public.payments (tag) VALUES ($1)', [b.tag]);
 *   }
 *   // Two instances behind a balancer; one deployed while PostgreSQL was down.
 *
 * Code path: lib/idempotency-schema.check.ts `check()` (run from `IdempotencyDatabase.ready()`
 * before the first statement when start-up could not reach the database): `withConnection`
 * takes a pooled connection as it is, `SCHEMA_CATALOG_QUERY` resolves the tables through its
 * path, `STRING_SYNTAX_QUERY` reads `current_setting('search_path')` = 'tenant_x', and
 * `pinLibraryPath('tenant_x')` (lib/data-layers/idempotency-database.ts) makes it every
 * statement's path (`pinSearchPath`, `restoreSessionState`, `beginWithClaim`).
 *
 * Docs quote: docs/guides/getting-started.md, "Where the library's tables live": "At start-up
 * its check resolves them through the `search_path` of a connection of the app's pool (the
 * role's, the database's, a `connect` hook's or the connection string's …) … So a
 * schema-per-tenant app may leave `SET search_path TO tenant_x` on a runner it gives back to
 * the pool without a reset: the library's claims, stored answers, renewals and purges still go
 * to the tables the start-up check found, not to a tenant schema's copy of them".
 *
 * Severity: high (the handler's effect twice under one key, silent; every key of the instance).
 *
 * Fails now (verified, pool of one connection per instance, replayCacheSize 0): the late
 * instance's b1 and later b2 (after the connection was put back on public) both stored in
 * tenant_x (counts 1 and 1); the retry of b1 on an instance started normally: 201 not
 * replayed, payments ['b1', 'b1']. No outage, an `onModuleInit` of the app's that left the
 * runner in tenant_x: the same (d1 in tenant_x, the retry elsewhere not replayed, paid twice).
 * Control: the same, the first request after the outage on public: the retry on the other
 * instance replays, one payment, the key in public.
 *
 * Suggested fix: read the path the session starts with, not the one it has now: the check
 * takes its own fresh connection (not a pooled one), or reads `reset_val` of search_path from
 * pg_settings (`SELECT reset_val FROM pg_settings WHERE name = 'search_path'`: the role's,
 * database's or connection string's, untouched by a session `SET`), or resolves the schema of
 * `idempotency_keys` from the catalog (`to_regclass` + `pg_namespace`) and pins that; and run
 * the late check through the same reset path as at start-up.
 */
import {
  Body,
  Controller,
  Headers,
  type INestApplication,
  Injectable,
  Module,
  type OnModuleInit,
  Post,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { readFileSync } from 'node:fs';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { TcpProxy } from '../../support/tcp-proxy.js';

@Controller()
class TenantController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('tenant')
  async tenantWork(@Headers('x-tenant') tenant?: string) {
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    try {
      const schema = tenant && /^[a-z]+$/.test(tenant) ? `tenant_${tenant}` : 'public';
      await runner.query(`SET search_path TO ${schema}`);
      await runner.query('INSERT INTO adv95_notes (note) VALUES ($1)', ['seen']);
    } finally {
      // As the recipe does: no RESET before the connection goes back to the pool.
      await runner.release();
    }
    return { ok: true };
  }

  @Post('pay')
  @Idempotent()
  async pay(@Body() body: { tag: string }) {
    await this.dataSource.query('INSERT INTO public.adv95_payments (tag) VALUES ($1)', [body.tag]);
    return { tag: body.tag };
  }
}

/** An instance of the app on `url`; `beforeCheck` runs once TypeORM connected, before the check. */
function startInstance(
  url: string,
  beforeCheck?: (dataSource: DataSource) => Promise<void>,
): Promise<INestApplication> {
  @Injectable()
  class BeforeCheck implements OnModuleInit {
    constructor(@InjectDataSource() private readonly dataSource: DataSource) {}
    async onModuleInit() {
      await beforeCheck?.(this.dataSource);
    }
  }
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url,
        logging: false,
        connectTimeoutMS: 1000,
        // One connection: the one the tenant's code left is the library's next.
        extra: { max: 1 },
      }),
      IdempotencyModule.forRoot({ globalKeys: true, replayCacheSize: 0, databaseTimeoutMs: 2000 }),
    ],
    controllers: [TenantController],
    providers: [{ provide: 'ADV95_BEFORE_CHECK', useClass: BeforeCheck }],
  })
  class InstanceModule {}
  return bootstrapTestApp(InstanceModule, 'express');
}

describe('adversary 95 path: the start-up check run late, on a connection a tenant’s code left', () => {
  let database: TestDatabase;
  let admin: Client;
  const proxies: TcpProxy[] = [];
  const apps: INestApplication[] = [];

  beforeAll(async () => {
    database = await createTestDatabase('adv95_path_late_check');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query(`
      CREATE TABLE public.adv95_payments (id serial PRIMARY KEY, tag text NOT NULL);
      CREATE TABLE public.adv95_notes (id serial PRIMARY KEY, note text NOT NULL);
      CREATE SCHEMA tenant_x;
      CREATE TABLE tenant_x.adv95_notes (id serial PRIMARY KEY, note text NOT NULL);
    `);
    // tenant_x made as many apps make a tenant: every migration run in its schema.
    await admin.query('SET search_path TO tenant_x');
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('RESET search_path');
  }, 60_000);

  afterAll(async () => {
    for (const app of apps) await app.close().catch(() => undefined);
    for (const proxy of proxies) await proxy.stop().catch(() => undefined);
    await admin?.end().catch(() => undefined);
    await database?.drop();
  });

  /** An instance started while the database was down (a deploy during an outage), then up. */
  async function startedDuringOutage(): Promise<INestApplication> {
    const target = new URL(database.url);
    const proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    proxies.push(proxy);
    await proxy.start();
    const viaProxy = new URL(database.url);
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(proxy.port);
    const app = await startInstance(viaProxy.toString(), () => proxy.refuse());
    apps.push(app);
    await proxy.restore();
    return app;
  }

  async function startedNormally(
    beforeCheck?: (dataSource: DataSource) => Promise<void>,
  ): Promise<INestApplication> {
    const app = await startInstance(database.url, beforeCheck);
    apps.push(app);
    return app;
  }

  const server = (app: INestApplication) => app.getHttpServer() as Parameters<typeof request>[0];
  const tenantWork = (app: INestApplication, tenant?: string) => {
    const call = request(server(app)).post('/tenant');
    return tenant ? call.set('X-Tenant', tenant) : call;
  };
  const pay = (app: INestApplication, key: string, tag: string) =>
    request(server(app)).post('/pay').set('Idempotency-Key', key).send({ tag });
  const payments = async (tag: string) =>
    (
      await admin.query<{ tag: string }>(
        'SELECT tag FROM public.adv95_payments WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.tag);
  const keysIn = async (schema: string, key: string) =>
    Number(
      (
        await admin.query<{ n: string }>(
          `SELECT count(*) AS n FROM ${schema}.idempotency_keys WHERE key = $1`,
          [key],
        )
      ).rows[0].n,
    );

  it('control: the late check on a clean connection: the retry on another instance replays', async () => {
    const late = await startedDuringOutage();
    expect((await tenantWork(late)).status).toBe(201);
    const first = await pay(late, 'adv95-c1', 'c1');
    const other = await startedNormally();
    const again = await pay(other, 'adv95-c1', 'c1');
    expect({
      statuses: [first.status, again.status],
      replayed: again.headers['idempotent-replayed'],
      payments: await payments('c1'),
      public: await keysIn('public', 'adv95-c1'),
      tenant: await keysIn('tenant_x', 'adv95-c1'),
    }).toEqual({ statuses: [201, 201], replayed: 'true', payments: ['c1'], public: 1, tenant: 0 });
  }, 60_000);

  it('the late check on a connection left in tenant_x: the retry on another instance replays, one payment', async () => {
    const late = await startedDuringOutage();
    // The first request after the outage is a tenant's, which leaves its path on the connection.
    expect((await tenantWork(late, 'x')).status).toBe(201);
    const first = await pay(late, 'adv95-b1', 'b1');
    // The tenant's code put back on public: the late check's path was pinned meanwhile.
    expect((await tenantWork(late)).status).toBe(201);
    const second = await pay(late, 'adv95-b2', 'b2');
    const other = await startedNormally();
    const again = await pay(other, 'adv95-b1', 'b1');
    expect({
      statuses: [first.status, second.status, again.status],
      replayed: again.headers['idempotent-replayed'],
      payments: await payments('b1'),
      public: await keysIn('public', 'adv95-b1'),
      tenant: await keysIn('tenant_x', 'adv95-b1'),
      laterKeyInTenant: await keysIn('tenant_x', 'adv95-b2'),
    }).toEqual({
      statuses: [201, 201, 201],
      replayed: 'true',
      payments: ['b1'],
      public: 1,
      tenant: 0,
      laterKeyInTenant: 0,
    });
  }, 60_000);

  it('no outage: a start-up hook of the app’s that walks its tenants first: the retry on another instance replays', async () => {
    // The app's own start-up step per tenant (a module's onModuleInit runs before the check,
    // which runs at onApplicationBootstrap): its runner given back as it was left.
    const provisioned = await startedNormally(async (dataSource) => {
      const runner = dataSource.createQueryRunner();
      await runner.connect();
      try {
        await runner.query('SET search_path TO tenant_x');
        await runner.query('INSERT INTO adv95_notes (note) VALUES ($1)', ['provisioned']);
      } finally {
        await runner.release();
      }
    });
    const first = await pay(provisioned, 'adv95-d1', 'd1');
    const other = await startedNormally();
    const again = await pay(other, 'adv95-d1', 'd1');
    expect({
      statuses: [first.status, again.status],
      replayed: again.headers['idempotent-replayed'],
      payments: await payments('d1'),
      public: await keysIn('public', 'adv95-d1'),
      tenant: await keysIn('tenant_x', 'adv95-d1'),
    }).toEqual({ statuses: [201, 201], replayed: 'true', payments: ['d1'], public: 1, tenant: 0 });
  }, 60_000);
});
