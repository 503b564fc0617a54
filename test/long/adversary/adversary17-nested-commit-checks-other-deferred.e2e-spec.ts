import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 17: a nested transaction's COMMIT runs the deferred checks of another
 * transaction that is still open, before that one has made its rows consistent.
 *
 * What the app does (Drizzle on the pool given to the library): `order_lines.order_id`
 * references `orders` with a foreign key `DEFERRABLE INITIALLY DEFERRED` (so that a graph of
 * rows can be written in any order). An order is written in a `db.transaction`: its lines first
 * (their ids are known, the order's total is not), then an event recorded by a service that
 * writes in a transaction of its own (`db.transaction` on `db`: the event stands alone), then
 * the order row with its total. Without the library (the control, no `@Idempotent()`): 201;
 * the event commits on its own connection, and the order's transaction commits with its
 * foreign key satisfied.
 *
 * What happens: on the request's one connection the event's transaction is a savepoint beside
 * the order's, an "outermost" nested transaction of its own view of the pool. Its COMMIT runs
 * "what was deferred to the commit" (lib/data-layers/nested-commit.ts, `SET CONSTRAINTS ALL
 * IMMEDIATE`), which is the order's lines' pending foreign-key checks: 23503 at the event's
 * COMMIT, whose transaction the library then rolls back. The order's transaction fails with it:
 * 500 stored and replayed for ever, nothing kept.
 *
 * What should happen: docs/guides/transactions.md: a nested transaction's COMMIT runs "what
 * was deferred to the commit … as its own COMMIT runs it"; its own COMMIT never checks another
 * transaction's deferred rows. (The docs add "what the request's own statements deferred before
 * runs then too", meaning the request's top level; here it is another data layer transaction,
 * still open.) Statements beside a nested transaction are allowed ("a commit keeps both, as
 * the app meant"). Expected: 201, one order and its lines, one event, the retry replayed.
 *
 * Why it matters: a correct program fails for ever. Low to medium: deferred foreign keys and
 * an event written "on its own" from inside a transaction are both ordinary; together, less.
 */
let db: NodePgDatabase;
let thePool: Pool;

async function recordEvent(what: string) {
  await db.transaction(async (tx) => {
    await tx.execute(sql`INSERT INTO events (what) VALUES (${what})`);
  });
}

async function placeOrder(ref: string) {
  await db.transaction(async (tx) => {
    const [{ id }] = (await tx.execute(sql`SELECT nextval('orders_id_seq')::int AS id`)).rows as {
      id: number;
    }[];
    await tx.execute(sql`INSERT INTO order_lines (order_id, amount) VALUES (${id}, 3), (${id}, 4)`);
    await recordEvent(`order ${ref} lines written`);
    await tx.execute(sql`INSERT INTO orders (id, ref, total) VALUES (${id}, ${ref}, 7)`);
  });
  return { ref };
}

@Controller()
class OrdersController {
  @Post('plain')
  plain(@Body() body: { ref: string }) {
    return placeOrder(body.ref);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { ref: string }) {
    return placeOrder(body.ref);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: thePool }) }),
  ],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 17: a nested COMMIT checks the deferred rows of another open transaction', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv17_deferred_beside', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        thePool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL, total int)',
        );
        await admin.query(
          'CREATE TABLE order_lines (order_id int NOT NULL REFERENCES orders (id) ' +
            'DEFERRABLE INITIALLY DEFERRED, amount int NOT NULL)',
        );
        await admin.query('CREATE TABLE events (what text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (ref: string) => {
    const orders = await fixture.admin.query('SELECT id FROM orders WHERE ref = $1', [ref]);
    const lines = await fixture.admin.query(
      'SELECT 1 FROM order_lines l JOIN orders o ON o.id = l.order_id WHERE o.ref = $1',
      [ref],
    );
    const events = await fixture.admin.query('SELECT 1 FROM events WHERE what = $1', [
      `order ${ref} lines written`,
    ]);
    return { orders: orders.rows.length, lines: lines.rows.length, events: events.rows.length };
  };

  const post = (path: string, ref: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ ref });
  };

  it('without the library (no @Idempotent): 201, the order, its lines, the event (control)', async () => {
    const answer = await post('/plain', 'a');
    expect({ status: answer.status, body: answer.body as unknown, kept: await kept('a') }).toEqual({
      status: 201,
      body: { ref: 'a' },
      kept: { orders: 1, lines: 2, events: 1 },
    });
  }, 20_000);

  it('under @Idempotent(): 201 once, replayed, the order, its lines, the event', async () => {
    const first = await post('/idempotent', 'b', 'order-b');
    const retry = await post('/idempotent', 'b', 'order-b');
    // Observed: { first: 500, retry: 500, kept: { orders: 0, lines: 0, events: 0 } } (23503
    // raised by the event's nested COMMIT, on the order's lines).
    expect({
      first: first.status,
      body: first.body as unknown,
      retry: retry.status,
      same: retry.text === first.text,
      kept: await kept('b'),
    }).toEqual({
      first: 201,
      body: { ref: 'b' },
      retry: 201,
      same: true,
      kept: { orders: 1, lines: 2, events: 1 },
    });
  }, 20_000);
});
