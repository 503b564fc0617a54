import { Body, Controller, Module, Post } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { PrismaClient } from '../../../docs/snippets/prisma/src/generated/prisma/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Prisma 7 on the pool given to the library, docs/guides/prisma.md, with the
 * guide's own schema: `Order.id BigInt @id @default(autoincrement())`): the most ordinary
 * Nest + Prisma handler, `return this.prisma.order.create({ data })`. The row Prisma hands
 * back holds `id: 1n`, a BigInt, which JSON cannot write: Nest answers 500 (Internal server
 * error) after the handler returned.
 *
 * What happens: under @Idempotent() the request's transaction commits the order together with
 * a stored 500, replayed to every retry: the client is told, for ever, that the request failed,
 * and the order exists (one row). The guide's table says a 500 of the handler's ("a bug's
 * 500") rolls its effects back and stores the error: here the bug's 500 comes from the answer
 * the handler returned, and the effects are kept.
 *
 * What should happen: the promise, "nothing kept from a request that failed": a 500 stored
 * and replayed with nothing of the request kept (or an answer that is not a failure, with
 * the order kept once). Either way the replay equals the first answer.
 *
 * Why it matters: BigInt ids are the guide's own schema and returning the created row is what
 * most Prisma handlers do; the app's logs show a 500, its operator refunds or re-places the
 * order, and the order the client was told failed ships anyway.
 */
let pool: Pool;
let prisma: PrismaClient;

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  create(@Body() body: { sku: string; quantity: number }) {
    return prisma.order.create({ data: { ...body, status: 'placed' } });
  }

  @Post('plain-orders')
  createPlain(@Body() body: { sku: string; quantity: number }) {
    return prisma.order.create({ data: { ...body, status: 'placed' } });
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 12: a Prisma row with a BigInt id, returned as the answer, commits with a stored 500', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv12_prisma_bigint', {
      module: OrdersModule,
      usePool: (started) => {
        pool = started;
        prisma = new PrismaClient({ adapter: new PrismaPg(started) });
      },
      setup: async (admin) => {
        await admin.query(`CREATE TABLE orders (
          id bigserial PRIMARY KEY, sku text NOT NULL, quantity int NOT NULL,
          status text NOT NULL, tracking_number text)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await prisma?.$disconnect();
    await fixture?.close();
  });

  const ordersOf = async (sku: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) AS n FROM orders WHERE sku = $1', [sku])).rows[0]
        .n,
    );

  it('without the library: Nest answers 500 (control: the body cannot be written)', async () => {
    const answer = await request(fixture.app.getHttpServer())
      .post('/plain-orders')
      .send({ sku: 'plain', quantity: 1 });
    expect(answer.status).toBe(500);
  }, 20_000);

  it('under @Idempotent(): a failed answer keeps nothing; the retry replays the first answer', async () => {
    const post = () =>
      request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', 'order-1')
        .send({ sku: 'widget', quantity: 1 });
    const first = await post();
    const retry = await post();
    const kept = await ordersOf('widget');
    expect({
      replayed: retry.status === first.status && retry.text === first.text,
      kept,
    }).toEqual({ replayed: true, kept: first.status >= 500 ? 0 : 1 });
  }, 20_000);
});
