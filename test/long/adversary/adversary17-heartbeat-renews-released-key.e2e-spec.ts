import { Body, Controller, Module, Post, Res } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/** Express' response, as far as this app uses it (no @types/express here). */
interface Response {
  status(code: number): { json(body: unknown): void };
}

/**
 * What the app does (the pool seam, Express, `leaseMs: 600`, the heartbeat on by default,
 * `storeIf: (status) => status < 500` as options.md suggests to keep server errors out): an
 * `@Res()` handler writes an order, then finds the payment provider down and answers
 * `res.status(503).json(...)` at once, and goes on after its answer with 2 s of work that
 * touches no database (alerting the on-call, flushing a log). The client retries with the same
 * key 300 ms and 1 s later, as the 503 invites.
 *
 * What happens: the 503 is not stored (storeIf), so the request is rolled back and its key
 * given back (RELEASE: `locked_until = NULL`) when the answer is written. But the handler has
 * not settled, so its heartbeat still runs (run-owned.ts: an answer written before the
 * handler settled stops it only at its settle), and its next tick, EXTEND_LEASE
 * `SET locked_until = GREATEST(locked_until, now + lease)`, leases the released key again
 * (GREATEST ignores the NULL). The retries get 409 key_in_progress for as long as the handler
 * goes on after its answer (and the lease after that): a key held by a request that has
 * already answered and given it back.
 *
 * What should happen (options.md storeIf: "the key is given back with the request's work
 * rolled back, and a retry runs it again"; the promise: "no hang that holds a key"): once
 * given back, the key stays free: the retries run the handler (201 once the provider is up).
 * The control, the same handler without its work after the answer, shows the retries running.
 *
 * Why it matters: any renewal after a release re-holds a key its owner gave up; here the
 * client gets 409s for the length of the post-answer work (unbounded: a slow alerting call).
 * The same happens on any other release while an `@Res()` handler goes on after writing (a
 * commit that fails with a 503 store_unavailable or database_transient). Low to medium.
 */
let pool: Pool;
let providerDown = true;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Controller()
class OrdersController {
  private async place(item: string, res: Response, after: number) {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders (item) VALUES ($1) RETURNING id',
      [item],
    );
    if (providerDown) {
      res.status(503).json({ error: 'payment provider down, retry' });
      await sleep(after); // alerting the on-call, after the answer
      return;
    }
    res.status(201).json({ id: rows[0].id, item });
  }

  @Post('orders')
  @Idempotent()
  create(@Body() body: { item: string }, @Res() res: Response) {
    return this.place(body.item, res, 2000);
  }

  @Post('orders-quick')
  @Idempotent()
  createQuick(@Body() body: { item: string }, @Res() res: Response) {
    return this.place(body.item, res, 0);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({
        globalKeys: true,
        pool,
        leaseMs: 600,
        storeIf: (status: number) => status < 500,
      }),
    }),
  ],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 17: the heartbeat leases again a key given back while its @Res handler goes on', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv17_heartbeat_released', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (path: string, item: string) =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', `key-${item}`)
      .send({ item });

  const kept = async (item: string) =>
    (await fixture.admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('no work after the answer: the key is free, the retries run (control)', async () => {
    providerDown = true;
    const first = await send('/orders-quick', 'gadget');
    await sleep(300);
    const retry = await send('/orders-quick', 'gadget');
    providerDown = false;
    await sleep(700);
    const again = await send('/orders-quick', 'gadget');
    expect({
      first: first.status,
      retry: retry.status,
      again: again.status,
      kept: await kept('gadget'),
    }).toEqual({ first: 503, retry: 503, again: 201, kept: 1 });
  }, 20_000);

  it('work after the answer: the given-back key is not held again by the heartbeat', async () => {
    providerDown = true;
    const first = await send('/orders', 'widget');
    await sleep(300);
    const retry = await send('/orders', 'widget');
    providerDown = false;
    await sleep(700);
    const again = await send('/orders', 'widget');
    // Observed: retry 409, again 409 (key_in_progress): leased again after its release.
    expect({
      first: first.status,
      retry: retry.status,
      again: again.status,
      kept: await kept('widget'),
    }).toEqual({ first: 503, retry: 503, again: 201, kept: 1 });
  }, 20_000);
});
