import { Body, Controller, Module, Post } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { PrismaClient } from '../../../docs/snippets/prisma/src/generated/prisma/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 28: `IdempotentTransaction.outside()` given Prisma queries in an ARRAY (one
 * audit event per line of the order, the list awaited by the caller):
 *
 *   const audits = IdempotentTransaction.outside(() =>
 *     lines.map((line) => prisma.orderEvent.create({ data: { kind: line } })),
 *   );
 *   await Promise.all(audits);
 *
 * What the app does (Prisma 7 on the pool handed to the library, docs/guides/prisma.md's
 * schema): inside the request, a Prisma interactive `$transaction` places the order, records
 * its audit events apart (they must survive a refusal: that is what `outside()` is for), and
 * is then refused by a business rule; the handler catches the refusal and answers
 * `{ placed: false }`.
 *
 * What happens: lib/idempotent-transaction.service.ts:57-66 (`outside`) starts a
 * foreign thenable only when `work` returns one itself (`isForeignThenable(result)`,
 * lib/transaction/foreign-thenable.ts:7-12); an array of Prisma queries is not one, so it is
 * handed back unstarted, and the queries run where `Promise.all` calls their `then()`: in the
 * request's scope, on the request's connection beside the open nested transaction (the very
 * case commit fdc8c17 fixed for a single query, fuzzer seed 3101). `Promise.all` resolves and
 * the refusal rolls the nested transaction back, yet the request answers 500
 * `transaction_aborted` (not stored: its retry does the same again) and the audit events are
 * lost with it; a handler that fails after such events (no nested transaction) loses them
 * too, rolled back with it. Where the same code with the `Promise.all` inside the callback (the
 * control) answers 201 and keeps both events. docs/guides/transactions.md ("a query it returns
 * unawaited ... is started there, not where it is awaited") and data-layers.md say nothing
 * of queries in a list.
 *
 * What is expected: the events commit on their own, the request answers its 201 (as in the
 * control), or a clear error saying the queries must be started in the callback.
 *
 * Severity: medium (a 500 on every try of a request whose handler answered, and the work
 * meant to commit apart never kept; nothing wrong is stored).
 */
let pool: Pool;
let prisma: PrismaClient;

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  async place(@Body() body: { sku: string; lines: string[]; listed: boolean }) {
    await prisma
      .$transaction(async (tx) => {
        await tx.order.create({ data: { sku: body.sku, quantity: 1, status: 'placed' } });
        if (body.listed) {
          const audits = IdempotentTransaction.outside(() =>
            body.lines.map((line) => prisma.orderEvent.create({ data: { kind: line } })),
          );
          await Promise.all(audits);
        } else {
          await IdempotentTransaction.outside(() =>
            Promise.all(
              body.lines.map((line) => prisma.orderEvent.create({ data: { kind: line } })),
            ),
          );
        }
        throw new Error('the order was refused');
      })
      .catch(() => undefined);
    return { sku: body.sku, placed: false };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 28: outside() with an array of Prisma queries', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv28_outside_array', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        prisma = new PrismaClient({ adapter: new PrismaPg(started) });
      },
      setup: async (admin) => {
        await admin.query(`CREATE TABLE orders (
          id bigserial PRIMARY KEY, sku text NOT NULL, quantity int NOT NULL,
          status text NOT NULL, tracking_number text);
          CREATE TABLE order_events (
          id bigserial PRIMARY KEY, order_id bigint REFERENCES orders, kind text NOT NULL,
          UNIQUE (order_id, kind))`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await prisma?.$disconnect();
    await fixture?.close();
  });

  const events = async (sku: string) =>
    Number(
      (
        await fixture.admin.query('SELECT count(*) FROM order_events WHERE kind LIKE $1', [
          `${sku}:%`,
        ])
      ).rows[0].count,
    );

  it.each<[string, boolean]>([
    ['control: Promise.all inside the callback', false],
    ['the queries handed back in an array, awaited by the caller', true],
  ])(
    '%s: the audit events commit apart, the request answers',
    async (_name, listed) => {
      const sku = `adv28-${listed ? 'listed' : 'inside'}`;
      const answer = await request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', sku)
        .send({ sku, lines: [`${sku}:a`, `${sku}:b`], listed });
      // Received with the array: 500 {"code":"transaction_aborted",...} and 0 events.
      expect({ status: answer.status, body: answer.body as unknown }).toEqual({
        status: 201,
        body: { sku, placed: false },
      });
      expect(await events(sku)).toBe(2);
    },
    20_000,
  );
});
