import { Body, Controller, Module, Post } from '@nestjs/common';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { integer, pgTable, text } from 'drizzle-orm/pg-core';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, IdempotentTransaction } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

/**
 * `IdempotentTransaction.outside()` given a query that runs when it is awaited (a Drizzle or
 * Kysely builder, a Prisma query, returned unawaited from the callback): the caller's `await`
 * ran it, in the request's transaction, not apart. Found by the fuzzer (Prisma, seed 3101:
 * `tx(outside)!?`): inside a nested transaction that then rolled back, the "outside" audit row
 * was a statement beside it on the request's connection, and the request answered 500
 * `transaction_aborted`. Now the work starts inside `outside()`, on a connection of its own.
 */
const audit = pgTable('audit', { ref: text('ref').notNull(), n: integer('n') });
const orders = pgTable('orders', { ref: text('ref').notNull() });
let db: NodePgDatabase;
let pool: Pool;

@Controller()
class OrdersController {
  /** The audit row apart (its builder returned unawaited or awaited), the order's try failing. */
  @Post('orders')
  @Idempotent()
  async place(@Body() body: { ref: string; awaited?: boolean }) {
    await db
      .transaction(async (tx) => {
        await tx.insert(orders).values({ ref: body.ref });
        await IdempotentTransaction.outside(() =>
          body.awaited
            ? (async () => await db.insert(audit).values({ ref: body.ref, n: 1 }))()
            : db.insert(audit).values({ ref: body.ref, n: 1 }),
        );
        throw new Error('the order was refused');
      })
      .catch(() => undefined);
    return { ref: body.ref, placed: false };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class AppModule {}

describe('IdempotentTransaction.outside() with a query that runs when awaited', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('outside_lazy', {
      module: AppModule,
      max: 3,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE audit (ref text NOT NULL, n int); CREATE TABLE orders (ref text NOT NULL)',
        );
      },
      usePool: (given) => {
        pool = given;
        db = drizzle(given);
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const count = async (table: string, ref: string) =>
    Number(
      (await fixture.admin.query(`SELECT count(*) FROM ${table} WHERE ref = $1`, [ref])).rows[0]
        .count,
    );

  it.each<[string, boolean]>([
    ['awaited inside the callback (the control)', true],
    ['returned unawaited from the callback', false],
  ])('%s: runs apart, committed on its own; the request answers', async (_name, awaited) => {
    const ref = `order-${awaited}`;
    const first = await request(fixture.app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', ref)
      .send({ ref, awaited });
    expect({ status: first.status, body: first.body as unknown }).toEqual({
      status: 201,
      body: { ref, placed: false },
    });
    expect(await count('audit', ref)).toBe(1);
    expect(await count('orders', ref)).toBe(0);
  });
});
