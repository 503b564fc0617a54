import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { adminUrl, createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): the app
 * connects as its own login role, not the database owner (the ordinary least-privilege set-up).
 * The same database holds another team's schema, `billing`, which the app's role has no USAGE
 * on; one of its foreign keys is `DEFERRABLE INITIALLY DEFERRED`. The handler writes an order
 * in a Drizzle transaction (`db.transaction`) and answers it. Without the library: 201.
 *
 * What happens: the nested transaction's COMMIT ends with the library's "deferred again" DO
 * block (lib/data-layers/nested-commit.ts DEFERRED_AGAIN), which reads every initially
 * deferred constraint of the whole database from pg_constraint (readable by all) and names
 * them all, schema-qualified, in one `SET CONSTRAINTS billing.…, … DEFERRED`. PostgreSQL looks
 * each qualified name's schema up with a USAGE check: 42501 "permission denied for schema
 * billing". The nested COMMIT fails, Drizzle rolls back, the request fails (500) for a correct
 * program, on every try: no nested transaction of the app's can ever commit.
 *
 * What should happen: 201 once, the order written once (the put-back names only what the
 * role may name, or what this transaction can have touched).
 *
 * Why it matters: a non-owner app role and a schema it cannot use are ordinary (a shared
 * database, an `audit` or `billing` schema); one deferred constraint anywhere breaks every
 * nested transaction of every request.
 */
let db: NodePgDatabase;
let pool: Pool;

async function placeOrder({ item }: { item: string }) {
  const row = await db
    .transaction(async (tx) => {
      const { rows } = await tx.execute<{ id: number }>(
        sql`INSERT INTO orders (item) VALUES (${item}) RETURNING id`,
      );
      return rows[0];
    })
    .catch((error: unknown) => {
      if (process.env.ADV_DEBUG) console.log((error as { cause?: unknown }).cause ?? error);
      throw error;
    });
  return { id: row.id, item };
}

@Controller()
class OrdersController {
  @Post('plain')
  plain(@Body() body: { item: string }) {
    return placeOrder(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { item: string }) {
    return placeOrder(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 13: an initially deferred constraint in a schema the app role cannot use', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;
  const role = `adv13_app_${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    database = await createTestDatabase('adv13_deferred_usage');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query(`
      CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL);
      CREATE SCHEMA billing;
      CREATE TABLE billing.accounts (id int PRIMARY KEY);
      CREATE TABLE billing.invoices (
        id int PRIMARY KEY,
        account_id int NOT NULL REFERENCES billing.accounts DEFERRABLE INITIALLY DEFERRED)`);
    await admin.query(`CREATE ROLE ${role} LOGIN`);
    await admin.query(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}`);
    await admin.query(`GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${role}`);
    const url = new URL(adminUrl());
    url.username = role;
    url.pathname = `/${database.name}`;
    pool = createTestPool({ connectionString: url.toString(), max: 2 });
    pool.on('error', () => undefined);
    db = drizzle(pool);
    app = await bootstrapTestApp(OrdersModule, 'express');
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
    const root = new Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${role}`);
    await root.end();
  });

  const items = async (item: string) =>
    (await admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('without the library (no @Idempotent): 201 (control)', async () => {
    const answer = await request(app.getHttpServer()).post('/plain').send({ item: 'a' });
    expect({ status: answer.status, items: await items('a') }).toEqual({ status: 201, items: 1 });
  }, 20_000);

  it('under @Idempotent(): 201 once, the order written once', async () => {
    const send = () =>
      request(app.getHttpServer())
        .post('/idempotent')
        .set('Idempotency-Key', 'key-1')
        .send({ item: 'b' });
    const first = await send();
    const retry = await send();
    // Observed: { first: 500, retry: 500, items: 0 } (42501 at the nested COMMIT).
    expect({ first: first.status, retry: retry.status, items: await items('b') }).toEqual({
      first: 201,
      retry: 201,
      items: 1,
    });
  }, 20_000);
});
