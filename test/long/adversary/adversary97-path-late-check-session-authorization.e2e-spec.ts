/**
 * Fixed (session of 2026-12-06 fifth): the start-up check reads the role the session logged in
 * as from the backend's own pg_stat_activity entry (`usename`), which `SET SESSION
 * AUTHORIZATION` does not change, not `session_user`, which it does (lib/idempotency-schema.check.ts
 * `SESSION_QUERY`); `"$user"` in the pinned path is that role.
 *
 * Adversary 97 (path): the start-up check expands `"$user"` of the sessions' default path with
 * `session_user` of the pooled connection it gets (lib/idempotency-schema.check.ts
 * `SESSION_QUERY`), and pins the result for the life of the process. `session_user` is not the
 * login role: `SET SESSION AUTHORIZATION` changes it (a superuser-login app that acts as a
 * tenant's role this way, schema and role per tenant, the path `"$user", public`), and a
 * connection given back without `RESET SESSION AUTHORIZATION` keeps it. A start-up step of the
 * app's own in `onModuleInit` (which Nest runs before the check's `onApplicationBootstrap`), or
 * the late check after an outage, then reads `session_user` = the tenant's role: `"$user"`
 * becomes the tenant's schema, which holds its copy of the library's tables (every migration
 * run per tenant), and every key of that instance is claimed and stored there, while every
 * other instance (and this one after a restart) uses public's. A retry that reaches another
 * instance runs the handler again. The path text itself is the default one, so the check does
 * not even log its warning. (Adversary 95's late check with `SET search_path`, fixed by
 * reading `reset_val`; this is the same hole through `"$user"`.)
 *
 * User code:
 *
 *   // login role postgres (superuser), default search_path "$user", public; role and schema
 *   // adv97_t per tenant, the library's migrations run in each tenant's schema too.
 *   class Provision implements OnModuleInit {
 *     async onModuleInit() {
 *       const runner = this.dataSource.createQueryRunner(); await runner.connect();
 *       await runner.query('SET SESSION AUTHORIZATION adv97_t'); …; await runner.release();
 *     }
 *   }
 *   @Post('pay') @Idempotent() async pay(@Body() b) {
 *     await this.dataSource.query('INSERT INTO public.adv97_payments (tag) VALUES ($1)', [b.tag]);
 *   }
 *   // Two instances behind a balancer.
 *
 * Code path: lib/idempotency-schema.check.ts `check()`: `SESSION_QUERY` reads `session_user`
 * as `login`; `resolvedLibraryPath(defaultPath, login, …)` (lib/connection/library-path.ts)
 * expands `$user` to it; `pinLibraryPath` (lib/data-layers/idempotency-database.ts) makes it
 * every statement's path.
 *
 * Docs quote: docs/guides/getting-started.md, "Where the library's tables live": "`"$user"`
 * becomes the role the pool logs in as (`session_user`, never a `SET ROLE`'s) … whatever the
 * session's path or role is when it gets the connection"; docs/reference/start-up-checks.md:
 * "The `search_path` is the one the pool's sessions start with (its `reset_val`, not a `SET`
 * left on the connection the check gets)".
 *
 * Severity: high (the handler's effect twice under one key, silent; every key of the instance).
 *
 * Fails now (verified, pool of one connection, replayCacheSize 0): the first instance pinned
 * `"adv97_t", "public"`: key adv97-b1 stored in adv97_t.idempotency_keys (tenant 1), the
 * retry on an instance started normally found none in public, ran the handler: 201 with no
 * Idempotent-Replayed, payments ['b1', 'b1'] (public 1 after it). No warning logged.
 * Control (the tenant step resets its authorization): replayed, one payment, the key in public.
 *
 * Suggested fix: expand `$user` with the role the session logged in as, not `session_user`:
 * `reset_val` of `session_authorization` in pg_settings (untouched by `SET SESSION
 * AUTHORIZATION`), or run the check on a fresh connection of its own / after `RESET SESSION
 * AUTHORIZATION` on a connection it then discards.
 */
import {
  Body,
  Controller,
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

@Controller()
class PayController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('pay')
  @Idempotent()
  async pay(@Body() body: { tag: string }) {
    await this.dataSource.query('INSERT INTO public.adv97_payments (tag) VALUES ($1)', [body.tag]);
    return { tag: body.tag };
  }
}

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
      TypeOrmModule.forRoot({ type: 'postgres', url, logging: false, extra: { max: 1 } }),
      IdempotencyModule.forRoot({ globalKeys: true, replayCacheSize: 0, databaseTimeoutMs: 2000 }),
    ],
    controllers: [PayController],
    providers: [{ provide: 'ADV97_BEFORE_CHECK', useClass: BeforeCheck }],
  })
  class InstanceModule {}
  return bootstrapTestApp(InstanceModule, 'express');
}

describe('adversary 97 path: the check expands "$user" with a SET SESSION AUTHORIZATION left on its connection', () => {
  let database: TestDatabase;
  let admin: Client;
  const apps: INestApplication[] = [];

  beforeAll(async () => {
    database = await createTestDatabase('adv97_path_session_auth');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query('DROP ROLE IF EXISTS adv97_t').catch(() => undefined);
    await admin.query('CREATE ROLE adv97_t');
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query(`
      CREATE TABLE public.adv97_payments (id serial PRIMARY KEY, tag text NOT NULL);
      CREATE SCHEMA adv97_t AUTHORIZATION adv97_t;
    `);
    // The tenant made as many apps make one: every migration run in its schema.
    await admin.query('SET search_path TO adv97_t');
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('RESET search_path');
    await admin.query(`
      GRANT USAGE ON SCHEMA public, adv97_t TO adv97_t;
      GRANT ALL ON ALL TABLES IN SCHEMA public, adv97_t TO adv97_t;
      GRANT ALL ON ALL SEQUENCES IN SCHEMA public, adv97_t TO adv97_t;
      GRANT ALL ON ALL FUNCTIONS IN SCHEMA public, adv97_t TO adv97_t;
    `);
  }, 60_000);

  afterAll(async () => {
    for (const app of apps) await app.close().catch(() => undefined);
    await admin?.end().catch(() => undefined);
    await database?.drop();
    const cleanup = new Client({ connectionString: database.url.replace(/\/[^/]*$/, '/postgres') });
    await cleanup.connect().catch(() => undefined);
    await cleanup.query('DROP ROLE IF EXISTS adv97_t').catch(() => undefined);
    await cleanup.end().catch(() => undefined);
  });

  const startedWith = async (beforeCheck?: (dataSource: DataSource) => Promise<void>) => {
    const app = await startInstance(database.url, beforeCheck);
    apps.push(app);
    return app;
  };
  const server = (app: INestApplication) => app.getHttpServer() as Parameters<typeof request>[0];
  const pay = (app: INestApplication, key: string, tag: string) =>
    request(server(app)).post('/pay').set('Idempotency-Key', key).send({ tag });
  const payments = async (tag: string) =>
    (
      await admin.query<{ tag: string }>(
        'SELECT tag FROM public.adv97_payments WHERE tag = $1 ORDER BY id',
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
  const actAsTenant = async (dataSource: DataSource, reset: boolean) => {
    const runner = dataSource.createQueryRunner();
    await runner.connect();
    try {
      await runner.query('SET SESSION AUTHORIZATION adv97_t');
      await runner.query('SELECT 1');
      if (reset) await runner.query('RESET SESSION AUTHORIZATION');
    } finally {
      await runner.release();
    }
  };

  it('control: the tenant step resets its authorization: the retry on another instance replays', async () => {
    const first = await pay(
      await startedWith((dataSource) => actAsTenant(dataSource, true)),
      'adv97-c1',
      'c1',
    );
    const again = await pay(await startedWith(), 'adv97-c1', 'c1');
    expect({
      statuses: [first.status, again.status],
      replayed: again.headers['idempotent-replayed'],
      payments: await payments('c1'),
      public: await keysIn('public', 'adv97-c1'),
      tenant: await keysIn('adv97_t', 'adv97-c1'),
    }).toEqual({ statuses: [201, 201], replayed: 'true', payments: ['c1'], public: 1, tenant: 0 });
  }, 60_000);

  it('a SET SESSION AUTHORIZATION left before the check: the retry on another instance replays, one payment (fixed, session of 2026-12-06 fifth)', async () => {
    const first = await pay(
      await startedWith((dataSource) => actAsTenant(dataSource, false)),
      'adv97-b1',
      'b1',
    );
    const again = await pay(await startedWith(), 'adv97-b1', 'b1');
    expect({
      statuses: [first.status, again.status],
      replayed: again.headers['idempotent-replayed'],
      payments: await payments('b1'),
      public: await keysIn('public', 'adv97-b1'),
      tenant: await keysIn('adv97_t', 'adv97-b1'),
    }).toEqual({ statuses: [201, 201], replayed: 'true', payments: ['b1'], public: 1, tenant: 0 });
  }, 60_000);
});
