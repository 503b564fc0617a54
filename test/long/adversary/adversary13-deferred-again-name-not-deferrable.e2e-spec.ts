import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): the
 * hand-written schema names two foreign keys to `orders` `order_fk` (constraint names are per
 * table): `order_lines.order_fk` is `DEFERRABLE INITIALLY DEFERRED` (an import writes a
 * line before its order), `shipments.order_fk` is a plain (not deferrable) foreign key. The
 * handler imports orders one Drizzle transaction each: the line first, then its order, which
 * the deferred foreign key allows. Without the library: 201, every order imported.
 *
 * What happens: the first nested COMMIT runs `SET CONSTRAINTS ALL IMMEDIATE`, then puts the
 * initially deferred constraints back "by name" (lib/data-layers/nested-commit.ts
 * DEFERRED_AGAIN), but leaves out any name also borne by a constraint not deferrable (it
 * "could not be named"). `order_lines.order_fk` stays IMMEDIATE for the rest of the request:
 * the second transaction's line, written before its order, fails at once (23503) and the
 * request fails, on every retry.
 *
 * What should happen: as transactions.md promises, "each constraint is then back in its
 * initial mode, as the next transaction would begin (a second nested transaction may again
 * insert a child before its parent under a deferred foreign key)": 201 once, both orders
 * imported.
 *
 * Why it matters: a correct program, relying on the documented put-back, fails for a
 * constraint name it shares with an unrelated table; the docs do not state this limit.
 */
let db: NodePgDatabase;
let pool: Pool;

type Import = { orders: number[] };

async function importOrders({ orders }: Import) {
  for (const id of orders) {
    await db.transaction(async (tx) => {
      await tx.execute(sql`INSERT INTO order_lines (order_id, item) VALUES (${id}, 'line')`);
      await tx.execute(sql`INSERT INTO orders (id) VALUES (${id})`);
    });
  }
  return { imported: orders };
}

@Controller()
class ImportController {
  @Post('plain')
  plain(@Body() body: Import) {
    return importOrders(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: Import) {
    return importOrders(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ImportController],
})
class ImportModule {}

describe('adversary 13: an initially deferred constraint sharing its name with a not-deferrable one stays immediate after a nested COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv13_name_not_deferrable', {
      module: ImportModule,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE orders (id int PRIMARY KEY);
          CREATE TABLE order_lines (
            order_id int NOT NULL CONSTRAINT order_fk REFERENCES orders
              DEFERRABLE INITIALLY DEFERRED,
            item text NOT NULL);
          CREATE TABLE shipments (
            order_id int NOT NULL CONSTRAINT order_fk REFERENCES orders)`);
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, body: Import, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send(body);
  };

  const imported = async (ids: number[]) =>
    (
      await fixture.admin.query<{ id: number }>(
        'SELECT id FROM orders WHERE id = ANY($1) ORDER BY id',
        [ids],
      )
    ).rows.map((row) => row.id);

  it('without the library (no @Idempotent): 201, both imported (control)', async () => {
    const answer = await post('/plain', { orders: [1, 2] });
    expect({ status: answer.status, orders: await imported([1, 2]) }).toEqual({
      status: 201,
      orders: [1, 2],
    });
  }, 20_000);

  it('under @Idempotent(): 201 once, both imported', async () => {
    const first = await post('/idempotent', { orders: [11, 12] }, 'key-1');
    const retry = await post('/idempotent', { orders: [11, 12] }, 'key-1');
    // Observed: 500 for both (23503 on the second transaction's line).
    expect({
      first: first.status,
      retry: retry.status,
      orders: await imported([11, 12]),
    }).toEqual({ first: 201, retry: 201, orders: [11, 12] });
  }, 20_000);
});
