/**
 * Fixed (session of 2026-12-06 fifth): the pinned path is resolved names, quoted, not the
 * setting's text: `"$user"` is expanded once, at the check, to the login role (`session_user`,
 * not a `SET ROLE`'s `current_user`) and kept only where such a schema exists
 * (`resolvedLibraryPath`, lib/connection/library-path.ts). Set-up corrected: the library's
 * statements run as the role the request's transaction began with (here the tenant's, left on
 * the connection), which must then be allowed to write `public.idempotency_keys`: granted, as
 * it is for the app's own tables (without it the claim is a loud 500, not a silent second run).
 */
/**
 * Adversary 95 (path): the path the library pins (f28c8ec) is the TEXT of the session's
 * `search_path` at the start-up check, re-sent as is: PostgreSQL's default `"$user", public`
 * then resolves, for each of the library's statements, through the role the statement runs as,
 * not the one the check ran as. A role-per-tenant app (row-level security by role, `SET ROLE
 * acme` on a runner given back without a reset, the same recipe as adversary 93's `SET
 * search_path`) whose tenant roles each own a schema of their name (PostgreSQL's docs' usage
 * pattern for "$user") with the app's migrations run in it, the library's included: the
 * library's claim runs as the role the transaction began with (the tenant's, left on the
 * pooled connection) and `"$user"` sends the key to acme.idempotency_keys; the retry on a
 * connection given back as the pool's role finds public's, without it: the handler runs twice.
 *
 * User code:
 *
 *   @Post('tenant') async tenantWork(@Headers('x-tenant') t) {
 *     const runner = this.dataSource.createQueryRunner(); await runner.connect();
 *     await runner.query(t === 'acme' ? 'SET ROLE acme' : 'SET ROLE NONE'); …
 *     await runner.release(); // no RESET
 *   }
 *   @Post('pay') @Idempotent() async pay(@Body() b) {
 *     await this.dataSource.query('INSERT INTO public.payments (tag) VALUES ($1)', [b.tag]);
 *   }
 *   // CREATE SCHEMA acme AUTHORIZATION acme; the migrations run as acme (default search_path).
 *
 * Code path: lib/idempotency-schema.check.ts reads `current_setting('search_path')` ('"$user",
 * public'), `IdempotencyDatabase.pinLibraryPath` keeps the text; lib/connection/session-state.ts
 * `pinSearchPath` re-sends it before the claim in `RequestTransaction.beginWithClaim`
 * (lib/transaction/request-transaction.ts), which runs as the role captured at BEGIN
 * (`CAPTURE_SESSION_STATE`: the tenant's): `$user` = acme.
 *
 * Docs quote: docs/guides/getting-started.md, "Where the library's tables live": "From then on
 * every statement of the library's runs with that same path, whatever the session's path is
 * when it gets the connection … the library's claims, stored answers, renewals and purges still
 * go to the tables the start-up check found, not to a tenant schema's copy of them … where a
 * retry on another connection would not see the key and the handler would run twice".
 *
 * Severity: high (the handler's effect twice under one key, silent).
 *
 * Fails now (verified, pool of one connection, replayCacheSize 0): statuses [201, 201], the
 * retry not replayed, payments ['b1', 'b1'], the key in both public's table (the retry's) and
 * the tenant schema's (the first request's).
 * Control: the connection given back as the pool's role: the retry replays, one payment, the
 * key in public alone.
 *
 * Suggested fix: pin what the check resolved, not the text that resolved it: the schema of
 * `idempotency_keys` from the catalog query (`pg_namespace` of its `pg_class` row), or
 * `current_schemas(false)` quoted one by one with `quote_ident` (which expands `$user` and drops
 * schemas that do not exist), as the pinned path.
 */
import { Body, Controller, Headers, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { adminUrl } from '../../support/database.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

const ROLE = `adv95_acme_${randomBytes(3).toString('hex')}`;

@Controller()
class TenantController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** A tenant's request runs as its role (row-level security by role), then gives the runner back. */
  @Post('tenant')
  async tenantWork(@Headers('x-tenant') tenant?: string) {
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    try {
      await runner.query(tenant === 'acme' ? `SET ROLE ${ROLE}` : 'SET ROLE NONE');
      await runner.query('INSERT INTO public.adv95_notes (note) VALUES ($1)', ['seen']);
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

describe('adversary 95 path: "$user" in the pinned path, a role per tenant', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv95_path_user_schema', {
      controllers: [TenantController],
      max: 1,
      idempotency: { globalKeys: true, replayCacheSize: 0 },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE public.adv95_payments (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE public.adv95_notes (id serial PRIMARY KEY, note text NOT NULL);
          CREATE ROLE ${ROLE} NOLOGIN;
          GRANT ALL ON public.adv95_payments, public.adv95_notes TO ${ROLE};
          GRANT ALL ON SEQUENCE public.adv95_payments_id_seq, public.adv95_notes_id_seq TO ${ROLE};
          CREATE SCHEMA ${ROLE} AUTHORIZATION ${ROLE};
        `);
        // The library's statements run as the role the request's transaction began with (the
        // tenant's, left on the connection): it may write the library's tables, as the app's.
        await admin.query(`GRANT ALL ON public.idempotency_keys TO ${ROLE}`);
        // The tenant's schema made as PostgreSQL's docs suggest for a user (the default
        // search_path's "$user"), every migration run by the tenant's role: the library's too.
        await admin.query(`SET ROLE ${ROLE}`);
        await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
        await admin.query('RESET ROLE');
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
    const admin = new Client({ connectionString: adminUrl() });
    await admin.connect();
    await admin.query(`DROP ROLE IF EXISTS ${ROLE}`).catch(() => undefined);
    await admin.end();
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
        'SELECT tag FROM public.adv95_payments WHERE tag = $1 ORDER BY id',
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

  it('control: the connection given back as the pool’s role: the retry replays, the key in public', async () => {
    expect((await tenantWork()).status).toBe(201);
    const first = await pay('adv95-c1', 'c1');
    const again = await pay('adv95-c1', 'c1');
    expect({
      statuses: [first.status, again.status],
      replayed: again.headers['idempotent-replayed'],
      payments: await payments('c1'),
      public: await keysIn('public', 'adv95-c1'),
      tenant: await keysIn(ROLE, 'adv95-c1'),
    }).toEqual({ statuses: [201, 201], replayed: 'true', payments: ['c1'], public: 1, tenant: 0 });
  }, 30_000);

  it('a connection left as the tenant’s role: the key in public, the retry replays, one payment', async () => {
    expect((await tenantWork('acme')).status).toBe(201);
    const first = await pay('adv95-b1', 'b1');
    expect((await tenantWork()).status).toBe(201);
    const again = await pay('adv95-b1', 'b1');
    expect({
      statuses: [first.status, again.status],
      replayed: again.headers['idempotent-replayed'],
      payments: await payments('b1'),
      public: await keysIn('public', 'adv95-b1'),
      tenant: await keysIn(ROLE, 'adv95-b1'),
    }).toEqual({ statuses: [201, 201], replayed: 'true', payments: ['b1'], public: 1, tenant: 0 });
  }, 30_000);
});
