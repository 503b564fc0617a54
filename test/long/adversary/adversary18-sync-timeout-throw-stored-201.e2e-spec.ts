import { Body, Controller, Headers, Module, Post, RequestTimeoutException } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express, defaults otherwise): deadline propagation. The
 * caller sends `X-Request-Deadline` (epoch ms); the handler, a plain (not `async`) method that
 * returns its service's Promise as Nest's docs write handlers, first checks that the deadline
 * has not passed and throws Nest's `RequestTimeoutException` (408) if it has, before doing
 * anything. The client (its clock was behind, or a proxy queued it) gets 408 and retries with
 * the same key and a fresh deadline.
 *
 * What happens: the 408 is a timeout (`isTimeoutError`), the handler has started, and
 * `handlerOutcome(context.handlerResult)` is taken as "the handler goes on". But the handler
 * threw synchronously: `@Idempotent()`'s wrapper never set `handlerResult` (undefined), and
 * `Promise.resolve(undefined)` resolves at once with `{ value: undefined }`. `settleDetached`
 * then renders that as the handler's answer and stores it: a `201` with an empty body. Every
 * retry of that key, for ever, replays an empty 201; the order is never placed, and the client
 * believes it was.
 *
 * What should happen (transactions.md, failure table: "a handler that threw the timeout
 * itself: rolled back, its key given back ... A timeout is never a stored answer"; the retry
 * "runs it again"): the 408 goes out unstored, the key is given back, the retry with a fresh
 * deadline runs the handler and gets its 201 with the order. The control, the same check in an
 * `async` handler (its Promise rejects instead), does exactly that.
 *
 * Why it matters: a stored success the handler never produced, replayed for ever: the worst
 * kind of wrong answer (the client stops retrying; nothing was done). Likely enough: any
 * synchronous throw of a 408/504 from a non-async handler (a deadline check, a circuit
 * breaker that answers 504, a sync validation of an upstream's state) takes this path.
 */
let pool: Pool;
let runs = 0;

function checkDeadline(deadline: string | undefined): void {
  if (deadline !== undefined && Number(deadline) < Date.now()) {
    throw new RequestTimeoutException('the request deadline has passed');
  }
}

@Controller()
class OrdersController {
  private async place(item: string) {
    await pool.query('INSERT INTO orders (item) VALUES ($1)', [item]);
    runs += 1;
    return { item };
  }

  @Post('sync')
  @Idempotent()
  sync(@Body() body: { item: string }, @Headers('x-request-deadline') deadline?: string) {
    checkDeadline(deadline);
    return this.place(body.item);
  }

  @Post('async')
  @Idempotent()
  async async(@Body() body: { item: string }, @Headers('x-request-deadline') deadline?: string) {
    checkDeadline(deadline);
    return this.place(body.item);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 18: a 408 thrown synchronously by a handler is stored as an empty 201', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv18_sync_timeout', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (path: string, item: string, deadline: number) =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', `key-${item}`)
      .set('X-Request-Deadline', String(deadline))
      .send({ item });

  const orders = async (item: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) AS n FROM orders WHERE item = $1', [item]))
        .rows[0].n,
    );

  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it('an async handler: 408, then the retry runs it (control)', async () => {
    runs = 0;
    const first = await send('/async', 'gadget', Date.now() - 1000);
    await sleep(300);
    const retry = await send('/async', 'gadget', Date.now() + 60_000);
    expect({
      first: first.status,
      retry: retry.status,
      body: retry.body as unknown,
      runs,
      orders: await orders('gadget'),
    }).toEqual({ first: 408, retry: 201, body: { item: 'gadget' }, runs: 1, orders: 1 });
  }, 20_000);

  it('a plain handler that throws the 408 at once: the retry runs it', async () => {
    runs = 0;
    const first = await send('/sync', 'widget', Date.now() - 1000);
    await sleep(300);
    const retry = await send('/sync', 'widget', Date.now() + 60_000);
    // Observed: first 408; retry 201 with an empty body (replayed), runs 0, orders 0.
    expect({
      first: first.status,
      retry: retry.status,
      body: retry.text,
      runs,
      orders: await orders('widget'),
    }).toEqual({ first: 408, retry: 201, body: '{"item":"widget"}', runs: 1, orders: 1 });
  }, 20_000);
});
