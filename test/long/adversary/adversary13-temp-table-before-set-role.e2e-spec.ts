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
 * row-level security by `SET LOCAL ROLE`): in one Drizzle transaction the handler loads the
 * client's items into a staging table (`CREATE TEMP TABLE staging … ON COMMIT DROP`, made by
 * the login role), copies them into `items`, then switches to the tenant's role
 * (`SET LOCAL ROLE tenant`) to count what the tenant now sees under its policies, and answers
 * that count. Without the library the transaction's COMMIT drops the staging table
 * (PostgreSQL ends ON COMMIT tables whatever the current role): 201.
 *
 * What happens: since f37a73d the nested COMMIT's put-back ends the temporary tables before
 * it puts the role back ("ended under the role its code set (the tables' owner)"). Here the
 * role its code set is not the table's owner: `DROP TABLE pg_temp.staging` runs as `tenant`,
 * 42501 "must be owner of table staging", after the RELEASE: the request's transaction is
 * aborted and the request fails (500), on every retry. (Drizzle's rollback that follows
 * then meets the savepoint already released: its code sees 3B001 "savepoint
 * idempotency_nested_1 does not exist", not even the 42501.) Without the `SET LOCAL ROLE`
 * the same handler passes.
 *
 * What should happen: 201 once, the items written once, the staging table gone, as the
 * nested COMMIT without the library.
 *
 * Why it matters: a staging temp table and a `SET LOCAL ROLE` for row-level security are both
 * documented, ordinary patterns; the fix for a table made under the role broke the one made
 * before it.
 */
let db: NodePgDatabase;
let pool: Pool;
const tenant = `adv13_tenant_${randomBytes(4).toString('hex')}`;

type Load = { items: string[] };

async function load({ items }: Load) {
  const seen = await db
    .transaction(async (tx) => {
      await tx.execute(sql`CREATE TEMP TABLE staging (item text NOT NULL) ON COMMIT DROP`);
      for (const item of items) await tx.execute(sql`INSERT INTO staging VALUES (${item})`);
      await tx.execute(sql`INSERT INTO items (item) SELECT item FROM staging`);
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

describe('adversary 13: a temporary table made before SET LOCAL ROLE is ended under the role', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv13_temp_before_role', {
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
    // Observed: { first: 500, retry: 500, items: 0 } (42501 dropping staging as the tenant).
    expect({ first: first.status, retry: retry.status, items: await count('b') }).toEqual({
      first: 201,
      retry: 201,
      items: 1,
    });
  }, 20_000);
});
