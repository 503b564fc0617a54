/**
 * Adversary 72: a plain READ sent beside a data layer's nested transaction (a service that
 * looks a product up with the injected `db` while `db.transaction()`'s callback runs), then
 * that transaction rolled back on a business rule (out of stock: `tx.rollback()`, Kysely's
 * thrown error) and the refusal answered by the handler (`{ placed: false }`): the request
 * answers 500 `transaction_aborted`, nothing stored, and every retry does the same. Without
 * the library the read ran on a connection of its own and the handler answered its 201; a
 * read taken along by a rollback loses nothing, and the library knows it on TypeORM
 * (`NestedIdentity`, "a plain read beside it: rolled back, it loses nothing"), not on a pool.
 *
 *   await db.transaction(async (tx) => {
 *     await tx.insert(orders).values({ tag, what: 'reserved' });
 *     const [stock] = await db.select().from(stock).where(...); // the catalog service's db
 *     if (stock.left < 1) tx.rollback();
 *   }).catch(() => placed = false);
 *   return { tag, placed };
 *
 * Why: `PoolTransaction.statement()` (lib/data-layers/pool-transaction.ts) calls
 * `markBeside(from)` for every statement of another view or of `pool.query()`, a plain
 * `SELECT` too (the read-apart path is only taken before the transaction opened); `rollBack()`
 * then refuses any savepoint marked `beside`. TypeORM's path (`NestedIdentity.ending`,
 * lib/data-layers/nested-identity.ts) lets a plain read through.
 *
 * Expected: docs/guides/transactions.md, for TypeORM: such a rollback "is refused with
 * `StatementBesideNestedTransactionError` (a plain read beside it loses nothing and is let
 * through), as on a node-postgres pool ([data layers])": the same on the pool. The handler's
 * 201 `{ placed: false }` stored and replayed, the reservation rolled back.
 *
 * Control: the same with no read beside (the callback reads with `tx`): 201 `{ placed: false }`.
 *
 * Severity: medium (a request whose handler answered gets 500 on every try, forever; nothing
 * wrong is committed; reading with the root `db` inside a transaction's callback is the
 * commonest service layout, and a business-rule rollback the commonest use of `rollback()`).
 *
 * Fails now: 'Expected status 201 { placed: false }, Received status 500
 * {"code":"transaction_aborted",...}', for Drizzle, Kysely and Prisma (`$queryRaw` on the
 * root client inside `$transaction`) alike (the three controls pass).
 *
 * Fixed: a plain read (`isPlainRead`) beside a nested transaction no longer marks it, as on
 * TypeORM (`markBeside` in lib/data-layers/pool-transaction.ts): its rollback is let through.
 * Since round 73 (adversary73-layers-read-beside-sees-rolled-back: a read beside may see what
 * the nested transaction wrote, which without the library it would not) only while that
 * nested transaction has written nothing: the read here comes before its insert (it came
 * after, which is now refused).
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { and, eq } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core';
import { PrismaPg } from '@prisma/adapter-pg';
import { Kysely, PostgresDialect } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { PrismaClient } from '../../../docs/snippets/prisma/src/generated/prisma/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const orders = pgTable('adv72r_orders', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
});
const stock = pgTable('adv72r_stock', {
  sku: text('sku').primaryKey(),
  left: integer('left').notNull(),
});

interface KyselyDb {
  adv72r_orders: { id?: number; tag: string };
  adv72r_stock: { sku: string; left: number };
}

let pool: Pool;
let db: NodePgDatabase;
let kdb: Kysely<KyselyDb>;
let prisma: PrismaClient;

type Body72 = { tag: string; layer: 'drizzle' | 'kysely' | 'prisma'; beside: boolean };

class OutOfStock extends Error {}

async function place(body: Body72) {
  const { tag } = body;
  let placed = true;
  if (body.layer === 'drizzle') {
    await db
      .transaction(async (tx) => {
        const reader = body.beside ? db : tx; // the catalog service's own db, or tx
        const [row] = await reader
          .select()
          .from(stock)
          .where(and(eq(stock.sku, 'book')));
        await tx.insert(orders).values({ tag });
        if (row.left < 1) tx.rollback();
      })
      .catch(() => {
        placed = false;
      });
    return { tag, placed };
  }
  if (body.layer === 'prisma') {
    await prisma
      .$transaction(async (tx) => {
        const reader = body.beside ? prisma : tx;
        const [row] = await reader.$queryRaw<{ left: number }[]>`
          SELECT "left" FROM adv72r_stock WHERE sku = 'book'`;
        await tx.$executeRaw`INSERT INTO adv72r_orders (tag) VALUES (${tag})`;
        if (row.left < 1) throw new OutOfStock('out of stock');
      })
      .catch(() => {
        placed = false;
      });
    return { tag, placed };
  }
  await kdb
    .transaction()
    .execute(async (trx) => {
      const reader = body.beside ? kdb : trx;
      const row = await reader
        .selectFrom('adv72r_stock')
        .selectAll()
        .where('sku', '=', 'book')
        .executeTakeFirstOrThrow();
      await trx.insertInto('adv72r_orders').values({ tag }).execute();
      if (row.left < 1) throw new OutOfStock('out of stock');
    })
    .catch(() => {
      placed = false;
    });
  return { tag, placed };
}

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  create(@Body() body: Body72) {
    return place(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 72: a plain read beside a nested transaction that rolls back', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv72_read_beside', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
        kdb = new Kysely<KyselyDb>({ dialect: new PostgresDialect({ pool: started }) });
        prisma = new PrismaClient({ adapter: new PrismaPg(started) });
      },
      setup: async (admin) => {
        await admin.query(`CREATE TABLE adv72r_orders (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE adv72r_stock (sku text PRIMARY KEY, "left" int NOT NULL);
          INSERT INTO adv72r_stock VALUES ('book', 0)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await prisma?.$disconnect();
    await fixture?.close();
  });

  const ordersOf = async (tag: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM adv72r_orders WHERE tag = $1', [tag]))
        .rows[0].count,
    );

  const post = (key: string, body: Body72) =>
    request(fixture.app.getHttpServer()).post('/orders').set('Idempotency-Key', key).send(body);

  it.each<[string, Body72['layer'], boolean]>([
    ['control, drizzle: the read with tx', 'drizzle', false],
    ['control, kysely: the read with trx', 'kysely', false],
    ['drizzle: the read with the root db, beside', 'drizzle', true],
    ['control, prisma: the read with tx', 'prisma', false],
    ['kysely: the read with the root db, beside', 'kysely', true],
    ['prisma: the read with the root client, beside', 'prisma', true],
  ])(
    '%s: the handler answers 201 { placed: false }, stored and replayed; nothing reserved',
    async (_name, layer, beside) => {
      const tag = `adv72r-${layer}-${String(beside)}`;
      const first = await post(tag, { tag, layer, beside });
      // Received with the read beside: 500 {"code":"transaction_aborted",...}.
      expect({ status: first.status, body: first.body as unknown }).toEqual({
        status: 201,
        body: { tag, placed: false },
      });
      const again = await post(tag, { tag, layer, beside });
      expect(again.status).toBe(201);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(await ordersOf(tag)).toBe(0);
    },
    20_000,
  );
});
