import { Body, Controller, GatewayTimeoutException, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express, defaults otherwise): a controller with a
 * class-level `@Idempotent()` (so every POST route of it is idempotent, as the decorator's
 * doc offers). `POST /orders` creates an order; `POST /checkout` reuses it, as Nest code often
 * does: it loads the cart, `const order = await this.create(body)`, then charges the payment provider, which times
 * out this time: the handler throws Nest's `GatewayTimeoutException` (504) for its upstream.
 * The client gets 504 and retries with the same key.
 *
 * What happens: `@Idempotent()`'s wrapper is on `create` too, and it runs again inside the
 * checkout's request: it sets `context.handlerResult` to `create`'s Promise, over checkout's
 * own. On the 504, `run-owned` takes the timeout for "the handler goes on" and waits for
 * `handlerOutcome(context.handlerResult)`: `create`'s Promise, resolved already with the
 * order. `settleDetached` commits checkout's effects (the order, no payment) and stores
 * `create`'s value, `201 {"item":...}`, as checkout's answer. The client got 504; every retry
 * replays a 201 for a checkout whose payment never happened, and the checkout never runs again.
 *
 * What should happen (transactions.md, failure table: "a handler that threw the timeout
 * itself: rolled back, its key given back ... A timeout is never a stored answer"; the retry
 * "runs it again"): rolled back, the key given back, the retry runs checkout and gets its
 * own answer. The control, the same controller with `create`'s body in a private method (no
 * wrapper), does exactly that.
 *
 * Why it matters: a stored answer that is not the handler's (another route's value) for a
 * request that failed, replayed for ever, with half its work committed. Medium likelihood:
 * calling a sibling route method is common Nest code, class-level `@Idempotent()` wraps every
 * POST, and a 504 for an upstream timeout is the usual mapping.
 */
let pool: Pool;
let attempts = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function charge(item: string): Promise<void> {
  attempts += 1;
  await sleep(50);
  // The payment provider is slow the first time only.
  if (attempts === 1) throw new GatewayTimeoutException('the payment provider timed out');
  await pool.query('INSERT INTO payments (item) VALUES ($1)', [item]);
}

/** Reads the cart before the order is made. */
async function loadCart(item: string): Promise<void> {
  await pool.query('SELECT count(*) FROM orders WHERE item = $1', [item]);
}

@Controller('wrapped')
@Idempotent()
class WrappedController {
  @Post('orders')
  async create(@Body() body: { item: string }) {
    await pool.query('INSERT INTO orders (item) VALUES ($1)', [body.item]);
    return { item: body.item };
  }

  @Post('checkout')
  async checkout(@Body() body: { item: string }) {
    await loadCart(body.item);
    const order = await this.create(body);
    await charge(order.item);
    return { ...order, paid: true };
  }
}

@Controller('plain')
@Idempotent()
class PlainController {
  private async createOrder(body: { item: string }) {
    await pool.query('INSERT INTO orders (item) VALUES ($1)', [body.item]);
    return { item: body.item };
  }

  @Post('orders')
  create(@Body() body: { item: string }) {
    return this.createOrder(body);
  }

  @Post('checkout')
  async checkout(@Body() body: { item: string }) {
    await loadCart(body.item);
    const order = await this.createOrder(body);
    await charge(order.item);
    return { ...order, paid: true };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [WrappedController, PlainController],
})
class ShopModule {}

describe('adversary 18: a sibling route called inside a handler supplies the answer of its 504', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv18_nested_route', {
      module: ShopModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
        await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (path: string, item: string) =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', `key-${item}`)
      .send({ item });

  const count = async (table: string, item: string) =>
    Number(
      (await fixture.admin.query(`SELECT count(*) AS n FROM ${table} WHERE item = $1`, [item]))
        .rows[0].n,
    );

  it('the order made in a private method: 504, then the retry runs checkout (control)', async () => {
    attempts = 0;
    const first = await send('/plain/checkout', 'gadget');
    await sleep(300);
    const retry = await send('/plain/checkout', 'gadget');
    expect({
      first: first.status,
      retry: retry.status,
      body: retry.body as unknown,
      orders: await count('orders', 'gadget'),
      payments: await count('payments', 'gadget'),
    }).toEqual({
      first: 504,
      retry: 201,
      body: { item: 'gadget', paid: true },
      orders: 1,
      payments: 1,
    });
  }, 20_000);

  it('the order made by the sibling route method: the retry runs checkout', async () => {
    attempts = 0;
    const first = await send('/wrapped/checkout', 'widget');
    await sleep(300);
    const retry = await send('/wrapped/checkout', 'widget');
    // Observed: first 504; retry 201 {"item":"widget"} (create's value, replayed), the order
    // committed, no payment, checkout never run again (attempts 1).
    expect({
      first: first.status,
      retry: retry.status,
      body: retry.body as unknown,
      orders: await count('orders', 'widget'),
      payments: await count('payments', 'widget'),
    }).toEqual({
      first: 504,
      retry: 201,
      body: { item: 'widget', paid: true },
      orders: 1,
      payments: 1,
    });
  }, 20_000);
});
