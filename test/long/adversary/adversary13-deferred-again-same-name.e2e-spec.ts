import { Body, Controller, Module, Post, UnprocessableEntityException } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): the
 * hand-written schema names both foreign keys to `orders` `order_fk` (constraint names are
 * per table in PostgreSQL): `order_lines.order_fk` is `DEFERRABLE INITIALLY DEFERRED` (lines
 * may be loaded before their order), `payments.order_fk` is `DEFERRABLE` but initially
 * IMMEDIATE (checked at each statement; deferrable only for a bulk load's `SET CONSTRAINTS`).
 * The handler adds a line in a Drizzle transaction, then records a payment for the order the
 * client named; a payment for an order that does not exist fails its insert with 23503, which
 * the handler turns into a 422. Without the library: 422 "no such order".
 *
 * What happens: the nested transaction's COMMIT puts the initially deferred constraints back
 * to DEFERRED "by name" (lib/data-layers/nested-commit.ts DEFERRED_AGAIN:
 * `SET CONSTRAINTS public.order_fk DEFERRED`). A name names every constraint of the schema
 * that bears it, so `payments.order_fk` is deferred too, for the rest of the request. The
 * payment's insert now succeeds, the handler answers 201 "paid", and the violation only
 * surfaces at the request's COMMIT, out of the handler's reach.
 *
 * What should happen: after the nested COMMIT each constraint is in its own initial mode, as
 * in the next transaction without the library: the payment's insert fails at once, the
 * handler answers 422 (nothing kept, as for any thrown error), and the retry replays 422.
 *
 * Why it matters: catching a foreign-key violation to answer 4xx is ordinary handler code,
 * and a shared constraint name across tables is ordinary SQL; the answer becomes a 5xx (or a
 * 201 for a payment never stored) instead of the program's 422.
 */
let db: NodePgDatabase;
let pool: Pool;

type Payment = { line: { order: number; item: string }; payFor: number };

async function pay({ line, payFor }: Payment) {
  await db.transaction(async (tx) => {
    await tx.execute(
      sql`INSERT INTO order_lines (order_id, item) VALUES (${line.order}, ${line.item})`,
    );
  });
  try {
    await db.execute(sql`INSERT INTO payments (order_id, amount) VALUES (${payFor}, 10)`);
  } catch (error) {
    const code = ((error as { cause?: { code?: string } }).cause ?? (error as { code?: string }))
      .code;
    if (code === '23503') throw new UnprocessableEntityException('no such order');
    throw error;
  }
  return { paid: payFor };
}

@Controller()
class PaymentsController {
  @Post('plain')
  plain(@Body() body: Payment) {
    return pay(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: Payment) {
    return pay(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
})
class PaymentsModule {}

describe('adversary 13: the nested COMMIT defers every constraint sharing an initially deferred one’s name', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv13_same_name', {
      module: PaymentsModule,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE orders (id int PRIMARY KEY);
          INSERT INTO orders VALUES (1), (2);
          CREATE TABLE order_lines (
            order_id int NOT NULL CONSTRAINT order_fk REFERENCES orders
              DEFERRABLE INITIALLY DEFERRED,
            item text NOT NULL);
          CREATE TABLE payments (
            order_id int NOT NULL CONSTRAINT order_fk REFERENCES orders DEFERRABLE,
            amount int NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, body: Payment, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send(body);
  };

  it('without the library (no @Idempotent): 422 (control)', async () => {
    const answer = await post('/plain', { line: { order: 1, item: 'a' }, payFor: 99 });
    expect(answer.status).toBe(422);
  }, 20_000);

  it('under @Idempotent(): 422, replayed, no payment kept', async () => {
    const body = { line: { order: 2, item: 'b' }, payFor: 98 };
    const first = await post('/idempotent', body, 'key-1');
    const retry = await post('/idempotent', body, 'key-1');
    const { rows } = await fixture.admin.query('SELECT 1 FROM payments WHERE order_id = 98');
    expect({ first: first.status, retry: retry.status, payments: rows.length }).toEqual({
      first: 422,
      retry: 422,
      payments: 0,
    });
  }, 20_000);
});
