/**
 * Adversary 76 (kysely): a Kysely transaction whose statement failed and was caught inside it
 * ends, without the library, with Kysely's `AbortedTransactionError` (PostgreSQL completes the
 * `COMMIT` of an aborted transaction with a `ROLLBACK` tag, which Kysely 0.29 turns into that
 * error). Under `@Idempotent()` it ends with node-postgres' 25P02 ("current transaction is
 * aborted, commands ignored until end of transaction block") instead: code that handles
 * `AbortedTransactionError` (its documented signal) does not recognise it, and the request
 * answers an error where without the library it answers its own fallback.
 *
 *   try {
 *     await db.transaction().execute(async (trx) => {
 *       await trx.insertInto('orders').values({ sku }).execute();
 *       // optional: a duplicate coupon is ignored
 *       await trx.insertInto('coupons').values({ code }).execute().catch(() => undefined);
 *     });
 *     return { placed: true };
 *   } catch (error) {
 *     if (error instanceof AbortedTransactionError) return { placed: false };
 *     throw error;
 *   }
 *
 * Why: a nested transaction's `COMMIT` on the pool seam's view is sent as `RELEASE SAVEPOINT …`
 * (lib/data-layers/pool-transaction.ts, the nested commit built in `endSavepoint`), which in
 * an aborted savepoint fails with 25P02, where a real `COMMIT` succeeds with the `ROLLBACK`
 * command tag. Kysely's `PostgresDriver.commitTransaction` reads that tag (`rows[0].command ===
 * 'ROLLBACK'` → `AbortedTransactionError`); it gets a thrown pg error instead. (Drizzle without
 * the library resolves such a transaction, its COMMIT having "succeeded"; under the library it
 * throws 25P02 too.)
 *
 * Docs (docs/guides/data-layers.md): on a view of the request's connection "`BEGIN` ... is a
 * savepoint, `COMMIT` releases it and `ROLLBACK` rolls back to it. So ... Drizzle's and
 * Kysely's `transaction()` nest, and a nested transaction that fails and is caught rolls back
 * alone while the rest commits with the answer." Nothing says its outcome reaches the data
 * layer as another error than PostgreSQL's COMMIT gives.
 *
 * Severity: low (the wrong error class: the app's handling of its own failure is skipped, and
 * the client gets an error instead of the app's answer; nothing committed twice).
 *
 * Fails now: the keyed route answers 500 (the handler rethrew the 25P02 error it did not
 * recognise), and so does its retry, not 201 `{"placed":false}`. Control: the same route without `@Idempotent()`
 * answers 201 `{"placed":false}` (the error is `AbortedTransactionError`).
 *
 * Suggested fix: send a nested `COMMIT` whose savepoint is aborted (the library saw a failure
 * inside it that no `ROLLBACK TO` cleared) as `ROLLBACK TO SAVEPOINT …; RELEASE SAVEPOINT …`
 * and answer the view with the `ROLLBACK` command tag, as PostgreSQL answers a `COMMIT` of an
 * aborted transaction. *
 * Fixed: a nested `COMMIT` whose `RELEASE` meets 25P02 rolls back to its savepoint and answers
 * the `ROLLBACK` tag (lib/data-layers/aborted-commit.ts, `PoolTransaction.onView`).
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { AbortedTransactionError, Kysely, PostgresDialect } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  orders: { id: string; sku: string };
  coupons: { code: string };
}

let pool: Pool;
let db: Kysely<Db>;

async function placeOrder(sku: string): Promise<{ placed: boolean }> {
  try {
    await db.transaction().execute(async (trx) => {
      await trx
        .insertInto('orders')
        .values({ sku } as never)
        .execute();
      // Optional: a coupon already used is ignored.
      await trx
        .insertInto('coupons')
        .values({ code: 'used' })
        .execute()
        .catch(() => undefined);
    });
    return { placed: true };
  } catch (error) {
    if (error instanceof AbortedTransactionError) return { placed: false };
    throw error;
  }
}

@Controller('orders')
class OrdersController {
  @Post('keyed')
  @HttpCode(201)
  @Idempotent()
  keyed(@Body() body: { sku: string }) {
    return placeOrder(body.sku);
  }

  /** The control: the same code without the library. */
  @Post('plain')
  @HttpCode(201)
  plain(@Body() body: { sku: string }) {
    return placeOrder(body.sku);
  }
}

describe('adversary 76 kysely: the commit of an aborted nested transaction', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv76_kysely_aborted_commit', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = new Kysely<Db>({ dialect: new PostgresDialect({ pool: started }) });
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
        await owner.query(`CREATE TABLE coupons (code text PRIMARY KEY)`);
        await owner.query(`INSERT INTO coupons VALUES ('used')`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(route: 'keyed' | 'plain', sku: string) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/orders/${route}`)
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku })
      .timeout(20_000);
    return { status: answer.status, body: answer.text };
  }

  const orders = async (sku: string) =>
    (await fixture.admin.query(`SELECT 1 FROM orders WHERE sku = $1`, [sku])).rows.length;

  it('control: without the library Kysely says AbortedTransactionError (201 placed false)', async () => {
    expect(await post('plain', 'plain-1')).toEqual({
      status: 201,
      body: JSON.stringify({ placed: false }),
    });
    expect(await orders('plain-1')).toBe(0);
  });

  it('under the library the same error reaches the app: 201 placed false, replayed', async () => {
    const first = await post('keyed', 'keyed-1');
    const retried = await post('keyed', 'keyed-1');
    expect({ first, retried, orders: await orders('keyed-1') }).toEqual({
      first: { status: 201, body: JSON.stringify({ placed: false }) },
      retried: { status: 201, body: JSON.stringify({ placed: false }) },
      orders: 0,
    });
  });
});
