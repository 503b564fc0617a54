import { randomBytes } from 'node:crypto';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { adminUrl } from '../../support/database.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md,
 * row-level security by `SET LOCAL ROLE`; the app's sessions log in as the database's
 * superuser, as many deployments still do): in one Drizzle transaction the handler writes the
 * client's items with every statement logged for a slow path it is chasing
 * (`SET LOCAL log_min_duration_statement = 0`, a superuser-only setting the login may set),
 * then switches to the tenant's role (`SET LOCAL ROLE tenant`) to count what the tenant now
 * sees, and answers the count. Without the library the COMMIT ends both settings: 201.
 *
 * What happens: since f37a73d the nested COMMIT's put-back restores the settings before it
 * puts the role back ("ended under the role its code set"). The tenant role may not set
 * `log_min_duration_statement`: `set_config('log_min_duration_statement', '-1', true)` fails,
 * 42501 "permission denied to set parameter", after the RELEASE: the request's transaction is
 * aborted and the request fails (500), on every retry. Without the `SET LOCAL ROLE` the same
 * handler passes (the order before f37a73d, role first, did too).
 *
 * What should happen: 201 once, the items written once, as the nested COMMIT without the
 * library (a COMMIT ends SET LOCAL settings whatever the current role).
 *
 * Why it matters: a setting the login may set and the role it switches to may not is
 * ordinary with `SET LOCAL ROLE` (PostgreSQL 15's `GRANT SET ON PARAMETER` makes it so for
 * non-superuser logins too); the put-back's new order turns that program into a 500.
 */
let db: NodePgDatabase;
let pool: Pool;
const tenant = `adv13_tenant_${randomBytes(4).toString('hex')}`;

type Load = { items: string[] };

async function load({ items }: Load) {
  const seen = await db
    .transaction(async (tx) => {
      await tx.execute(sql`SET LOCAL log_min_duration_statement = 0`);
      for (const item of items) await tx.execute(sql`INSERT INTO items (item) VALUES (${item})`);
      await tx.execute(sql.raw(`SET LOCAL ROLE ${tenant}`));
      const { rows } = await tx.execute<{ n: number }>(sql`SELECT count(*)::int AS n FROM items`);
      return rows[0].n;
    })
    .catch((error: unknown) => {
      if (process.env.ADV_DEBUG) console.log((error as { cause?: unknown }).cause ?? error);
      throw error;
    });
  return { loaded: items.length, seen };
}

@Controller()
class LoadController {
  @Post('plain')
  plain(@Body() body: Load) {
    return load(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: Load) {
    return load(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [LoadController],
})
class LoadModule {}

describe('adversary 13: a superuser-only setting set before SET LOCAL ROLE is put back under the role', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv13_setting_before_role', {
      module: LoadModule,
      max: 1,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE ROLE ${tenant} NOLOGIN;
          CREATE TABLE items (id serial PRIMARY KEY, item text NOT NULL);
          GRANT SELECT ON items TO ${tenant}`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
    const root = new Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${tenant}`);
    await root.end();
  });

  const post = (path: string, body: Load, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send(body);
  };

  const count = async (item: string) =>
    (await fixture.admin.query('SELECT 1 FROM items WHERE item = $1', [item])).rows.length;

  it('without the library (no @Idempotent): 201 (control)', async () => {
    const answer = await post('/plain', { items: ['a'] });
    expect({ status: answer.status, items: await count('a') }).toEqual({ status: 201, items: 1 });
  }, 20_000);

  it('under @Idempotent(): 201 once, the items written once', async () => {
    const first = await post('/idempotent', { items: ['b'] }, 'key-1');
    const retry = await post('/idempotent', { items: ['b'] }, 'key-1');
    // Observed: { first: 500, retry: 500, items: 0 } (42501 putting log_min_duration_statement back as the tenant).
    expect({ first: first.status, retry: retry.status, items: await count('b') }).toEqual({
      first: 201,
      retry: 201,
      items: 1,
    });
  }, 20_000);
});
