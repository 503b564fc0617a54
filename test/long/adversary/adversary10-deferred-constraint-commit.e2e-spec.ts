import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): a
 * foreign key declared `DEFERRABLE INITIALLY DEFERRED` (usual for rows that point at each
 * other, or a batch inserted in any order), checked by PostgreSQL at COMMIT. The handler
 * places an order in `db.transaction(…)` and, when that transaction's COMMIT fails with a
 * foreign-key violation (23503: the product is unknown), records the order as rejected and
 * answers 201 `{ status: 'rejected' }`: the ordinary try/catch around a transaction.
 *
 * What happens: inside a request the nested transaction is a savepoint; its `RELEASE
 * SAVEPOINT` checks no deferred constraint, so Drizzle's COMMIT succeeds, the handler answers
 * `placed`, and the violation surfaces only at the request's own COMMIT (23503 in the server's
 * log, on `COMMIT`). The request answers 500 `transaction_aborted` ("a statement … failed and
 * the handler went on", which it did not), nothing kept: the handler's fallback never ran, and
 * every retry runs it all again and meets the same 500.
 *
 * What should happen: as without the library: the nested transaction's COMMIT raises the
 * violation to the handler's code, which records the rejection: 201 `{ status: 'rejected' }`
 * once, its rejection row kept, the retry replays it.
 */
let db: NodePgDatabase;

async function work(body: { id: string; product: string }) {
  try {
    await db.transaction(async (tx) => {
      await tx.execute(
        sql`INSERT INTO orders (id, product_id) VALUES (${body.id}, ${body.product})`,
      );
    });
    return { id: body.id, status: 'placed' };
  } catch (error) {
    if ((error as { cause?: { code?: string } }).cause?.code !== '23503') throw error;
    await db.execute(sql`INSERT INTO rejections (order_id) VALUES (${body.id})`);
    return { id: body.id, status: 'rejected' };
  }
}

@Controller()
class OrdersController {
  @Post('plain')
  plain(@Body() body: { id: string; product: string }) {
    return work(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { id: string; product: string }) {
    return work(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [OrdersController],
})
class OrdersModule {}

let pool: Pool;
const poolOf = () => pool;

describe('adversary 10: a deferred constraint of a nested transaction is checked at the request’s commit', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv10_deferred_constraint', {
      module: OrdersModule,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE products (id text PRIMARY KEY)');
        await admin.query(
          'CREATE TABLE orders (id text PRIMARY KEY, product_id text NOT NULL ' +
            'REFERENCES products (id) DEFERRABLE INITIALLY DEFERRED)',
        );
        await admin.query('CREATE TABLE rejections (order_id text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, id: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ id, product: 'no-such' });
  };

  it('without the library (no @Idempotent): 201 rejected (control)', async () => {
    const answer = await post('/plain', 'plain-1');
    expect({ status: answer.status, body: answer.body as unknown }).toEqual({
      status: 201,
      body: { id: 'plain-1', status: 'rejected' },
    });
  }, 30_000);

  it('under @Idempotent(): 201 rejected once, the rejection kept, the retry replays it', async () => {
    const first = await post('/idempotent', 'order-1', 'key-1');
    const second = await post('/idempotent', 'order-1', 'key-1');
    const { rows } = await fixture.admin.query(
      "SELECT count(*)::int AS n FROM rejections WHERE order_id = 'order-1'",
    );
    expect({
      first: { status: first.status, body: first.body as unknown },
      second: { status: second.status, body: second.body as unknown },
      rejections: rows[0].n as number,
    }).toEqual({
      first: { status: 201, body: { id: 'order-1', status: 'rejected' } },
      second: { status: 201, body: { id: 'order-1', status: 'rejected' } },
      rejections: 1,
    });
  }, 30_000);
});
