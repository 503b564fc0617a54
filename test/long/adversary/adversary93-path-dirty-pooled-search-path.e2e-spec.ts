/**
 * Fixed (session of 2026-12-06 fifth): the library's statements run with the search path the
 * start-up check resolved its tables through (lib/idempotency-schema.check.ts reads the
 * session's `search_path` in its existing second statement and hands it to
 * `IdempotencyDatabase.pinLibraryPath`), whatever a pooled session's path is by then: the
 * autocommit statements (`IdempotencyDatabase.query`: claims made apart, completions,
 * releases, renewals, purges, bodies, health, ticks) carry `set_config('search_path', …, true)`
 * in their own round trip (`queryWithDeadline`'s `send`, `runSurrounded`); in the request's
 * transaction the claim is pinned and the handler's path put back around it in the same text
 * (`beginWithClaim`), and the fenced commit and own statements set it instead of the path kept
 * at `BEGIN` (`restoreSessionState` / `swapSessionState`, the decision in `librarySearchPath`,
 * lib/connection/session-state.ts, with its table in session-state.spec.ts). No round trip
 * more; the handler's own statements keep the session's path. Not covered: a consumer's
 * `@IdempotentMessage()` record (it opens the transaction: it keeps the session's path, as
 * before, and its commit with it), `ProcessedMessages.processOnce` (the app's transaction), the
 * partitioned store's partition maintenance and the CLI (their own sessions).
 *
 * Adversary 93 (path): a schema-per-tenant app leaves its pooled connections with a tenant's
 * session `search_path`, and the library's own statements follow it. The library's SQL names
 * its tables unqualified (`idempotency_keys`, `processed_messages`, …) and runs on connections
 * of the app's pool. The common TypeORM recipe for schema-per-tenant (`SET search_path TO
 * tenant_x` on a query runner, released without a reset) hands the next user of that
 * connection, the library included, the tenant's schema. (a) A tenant schema without the
 * library's tables: the claim fails, 500 `database_permanent`, on whichever request meets the
 * dirty connection. (b) Worse: tenant schemas are often made by running every migration per
 * schema, the library's included, so `tenant_x.idempotency_keys` exists; a key claimed on a
 * dirty connection lands there, and its retry on a clean connection does not see it: the
 * handler runs twice.
 *
 * User code:
 *
 *   @Post('tenant') async tenantWork(@Headers('x-tenant') tenant?: string) {
 *     const runner = this.dataSource.createQueryRunner();
 *     await runner.connect();
 *     await runner.query(`SET search_path TO ${tenant ? `tenant_${tenant}` : 'public'}`);
 *     await runner.query('INSERT INTO adv93_notes (note) VALUES ($1)', ['seen']);
 *     await runner.release(); // no RESET: the pooled connection keeps the tenant's path
 *   }
 *   @Post('pay') @Idempotent() async pay(@Body() b) {
 *     await this.dataSource.query('INSERT INTO public.adv93_payments (tag) VALUES ($1)', [b.tag]);
 *     return { tag: b.tag };
 *   }
 *   // tenant_x: every migration run with search_path tenant_x (the library's too);
 *   // tenant_y: the app's own tables only.
 *
 * Code path: lib/claim/postgres-statements.ts (unqualified `idempotency_keys`), sent by
 * lib/transaction/request-transaction.ts `beginWithClaim` (and `IdempotencyDatabase.query` for
 * claims made apart, completions, releases): resolved through the session's `search_path`,
 * which the app's earlier use of the pooled connection set; the state kept at `BEGIN`
 * (lib/connection/session-state.ts) is that dirty path too, so the fenced commit follows it.
 *
 * Docs quote: docs/guides/migrations.md: the start-up check "reads the schema … the app's
 * sessions see (its search_path, as the library's unqualified statements resolve them)"
 * (lib/schema/schema-check.ts); nothing says a session's later `SET search_path` moves the
 * library to another schema's tables.
 *
 * Severity: high for (b) (the handler's effect twice under one key, silent), medium for (a)
 * (a 500 on a random request).
 *
 * Fails now (verified, pool of one connection, no replay kept in memory as for a retry that
 * reaches another instance): (b) statuses [201, 201] but payments ['b1', 'b1'] (the handler ran
 * twice), the key in both tenant_x's table and public's (expected public's alone); (a) status
 * 500 code database_permanent, nothing paid (expected 201).
 * Control: the same requests with the tenant's code on public: one payment, the key in public.
 *
 * Suggested fix: the library's statements run with the search path the start-up check resolved
 * its tables through, whatever a session's later `SET search_path` left: either qualified
 * names built once from the schema the check found, or that path pinned for each of its
 * statements (`set_config('search_path', …, true)` in the statement's own round trip), the
 * handler's path left as it was.
 */
import { Body, Controller, Headers, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { readFileSync } from 'node:fs';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

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
      await runner.query('INSERT INTO adv93_notes (note) VALUES ($1)', ['seen']);
    } finally {
      // As the recipe does: no RESET before the connection goes back to the pool.
      await runner.release();
    }
    return { ok: true };
  }

  @Post('pay')
  @Idempotent()
  async pay(@Body() body: { tag: string }) {
    await this.dataSource.query('INSERT INTO public.adv93_payments (tag) VALUES ($1)', [body.tag]);
    return { tag: body.tag };
  }
}

describe('adversary 93 path: a pooled connection left with a tenant’s search_path', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv93_path_dirty_pool', {
      controllers: [TenantController],
      // One connection: the one a tenant's code left dirty is the next request's.
      max: 1,
      // A retry that reaches another instance (none kept in this process's memory).
      idempotency: { globalKeys: true, replayCacheSize: 0 },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE public.adv93_payments (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE public.adv93_notes (id serial PRIMARY KEY, note text NOT NULL);
          CREATE SCHEMA tenant_x;
          CREATE TABLE tenant_x.adv93_notes (id serial PRIMARY KEY, note text NOT NULL);
          CREATE SCHEMA tenant_y;
          CREATE TABLE tenant_y.adv93_notes (id serial PRIMARY KEY, note text NOT NULL);
        `);
        // tenant_x made as many apps make a tenant: every migration run in its schema.
        await admin.query('SET search_path TO tenant_x');
        await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
        await admin.query('RESET search_path');
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const server = () => app.getHttpServer() as Parameters<typeof request>[0];
  const tenantWork = (tenant?: string) => {
    const call = request(server()).post('/tenant');
    return tenant ? call.set('X-Tenant', tenant) : call;
  };
  const pay = (key: string, tag: string) =>
    request(server()).post('/pay').set('Idempotency-Key', key).send({ tag });
  const payments = async (tag: string) =>
    (
      await fixture.admin.query<{ tag: string }>(
        'SELECT tag FROM public.adv93_payments WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.tag);
  const keysIn = async (schema: string, key: string) =>
    Number(
      (
        await fixture.admin.query<{ n: string }>(
          `SELECT count(*) AS n FROM ${schema}.idempotency_keys WHERE key = $1`,
          [key],
        )
      ).rows[0].n,
    );

  it('control: clean connections: the retry replays, the payment once, the key in public', async () => {
    expect((await tenantWork()).status).toBe(201);
    const first = await pay('adv93-c1', 'c1');
    expect((await tenantWork()).status).toBe(201);
    const again = await pay('adv93-c1', 'c1');
    expect({
      statuses: [first.status, again.status],
      payments: await payments('c1'),
      public: await keysIn('public', 'adv93-c1'),
      tenant: await keysIn('tenant_x', 'adv93-c1'),
    }).toEqual({ statuses: [201, 201], payments: ['c1'], public: 1, tenant: 0 });
  }, 30_000);

  it('(b) the key claimed on a connection left in tenant_x, retried on a clean one: one payment', async () => {
    // The only connection left with tenant_x's path (its own copy of the library's tables).
    expect((await tenantWork('x')).status).toBe(201);
    const first = await pay('adv93-b1', 'b1');
    // Another request of the app's puts the connection back on public.
    expect((await tenantWork()).status).toBe(201);
    const again = await pay('adv93-b1', 'b1');
    expect({
      statuses: [first.status, again.status],
      payments: await payments('b1'),
      public: await keysIn('public', 'adv93-b1'),
      tenant: await keysIn('tenant_x', 'adv93-b1'),
    }).toEqual({ statuses: [201, 201], payments: ['b1'], public: 1, tenant: 0 });
  }, 30_000);

  it('(a) a connection left in tenant_y, which has none of the library’s tables: 201, not 500', async () => {
    expect((await tenantWork('y')).status).toBe(201);
    const first = await pay('adv93-a1', 'a1');
    expect({
      status: first.status,
      code: (first.body as { code?: string }).code,
      payments: await payments('a1'),
      public: await keysIn('public', 'adv93-a1'),
    }).toEqual({ status: 201, code: undefined, payments: ['a1'], public: 1 });
  }, 30_000);
});
