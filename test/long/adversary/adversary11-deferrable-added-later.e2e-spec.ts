import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): the app
 * is running when a migration (a rolling deploy's, run by the next version or by hand) adds a
 * foreign key declared `DEFERRABLE INITIALLY DEFERRED` to a table it writes. The handler
 * places an order in `db.transaction(…)` and, when that transaction's COMMIT fails with a
 * foreign-key violation (23503: the product is unknown), records the order as rejected and
 * answers 201 `{ status: 'rejected' }`: the ordinary try/catch around a transaction (round 10's
 * deferred-constraint-commit, which now passes when the constraint is there at start-up).
 *
 * What happens: the library checks deferred constraints at a nested transaction's COMMIT only
 * when its catalog read (once, at its first request) showed a deferrable constraint; the one
 * added since is never seen. Drizzle's COMMIT succeeds, the handler answers `placed`, and the
 * violation surfaces at the request's own COMMIT: 500 `transaction_aborted`, nothing kept,
 * the fallback never run, and every retry meets the same 500 until the process restarts.
 *
 * What should happen: as without the library (and as the same process would after a restart):
 * the nested COMMIT raises the violation to the handler, which records the rejection: 201
 * `{ status: 'rejected' }` once, its rejection row kept, the retry replays it.
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

describe('adversary 11: a deferrable constraint added after the app started is not checked at a nested commit', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv11_deferred_added_later', {
      module: OrdersModule,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE products (id text PRIMARY KEY)');
        await admin.query('CREATE TABLE orders (id text PRIMARY KEY, product_id text NOT NULL)');
        await admin.query('CREATE TABLE rejections (order_id text NOT NULL)');
      },
    });
    // The app serves a request (the library reads its catalog then)...
    const warm = await request(fixture.app.getHttpServer())
      .post('/idempotent')
      .set('Idempotency-Key', 'warm-up')
      .send({ id: 'warm-up', product: 'no-such' });
    if (warm.status !== 201) throw new Error(`warm-up answered ${warm.status}`);
    // ...then a migration adds the deferred foreign key while it runs.
    await fixture.admin.query("DELETE FROM orders WHERE id = 'warm-up'");
    await fixture.admin.query(
      'ALTER TABLE orders ADD FOREIGN KEY (product_id) REFERENCES products (id) ' +
        'DEFERRABLE INITIALLY DEFERRED',
    );
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
