/**
 * Fixed (session of 2026-12-06, seventh): a view used from another request's open scope joins
 * that request (`placeOfClient`, lib/data-layers/client-place.ts; a stand-in view of its
 * connection, `JoinedClient.placed` in lib/data-layers/pool-transaction.ts), never the
 * transaction of the request it was taken in: B's write commits with B's stored 201, A's rolls
 * back alone.
 *
 * Adversary 103 (pool): a client taken with `pool.connect()` in request A and kept by the app
 * (`this.client ??= await pool.connect()`), used by request B while A is still running, runs
 * B's statements in A's transaction, on A's connection. When A then fails for a passing
 * reason (503, rolled back), B's write goes with it, though B answered 201 and stored that 201:
 * B's retry replays 201 for an order that is not there. No refusal, no warning.
 *
 * User code:
 *   @Post() @Idempotent()
 *   async place(@Body() { sku }) {
 *     this.client ??= await pool.connect();          // the module's pool, kept for next time
 *     await this.client.query('INSERT INTO orders (sku) VALUES ($1)', [sku]);
 *     ... // A only: slower work, then a passing failure (its own statement timeout) -> 503
 *     return { sku };
 *   }
 *   A = POST sku A (slow, fails), B = POST sku B 100 ms later (fast)
 *
 * Code path: lib/data-layers/pool-transaction.ts / runner-view.ts (a view is bound to the
 * request that connected it: statements sent on it from another request's async context are
 * sent on that request's connection, in its transaction, and judged as its own);
 * lib/transaction/request-transaction.ts (B's commit stores its 201 with none of B's writes,
 * since B's write was never B's).
 *
 * Docs quote: data-layers.md: "The request a statement belongs to is the one in whose async
 * context it is sent" (here B's); transactions.md (TypeORM's analog): "A repository, manager or
 * runner kept from one request (`this.repo ??= tx.getRepository(Entity)`) joins the request it
 * is used in later or at the same time"; the promise: a request's effects commit once with its
 * stored answer, or not at all.
 *
 * Severity: high (a stored 201 replayed for an effect that was rolled back: a lost order).
 *
 * Fails now: A answers 503 `database_transient`; B answers 201 and its retry replays 201; the
 * orders table holds neither A's nor B's row. Control: the same two requests with a client
 * taken in each request keep B's row (A's rolled back).
 *
 * Suggested fix: a view used from another request's async context (or from none) is refused at
 * once with a clear error (the client belongs to request A; take a client with
 * `pool.connect()` in each request), or joins the request it is used in, as TypeORM's kept
 * runner does; say it in data-layers.md.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool, type PoolClient } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
let kept: PoolClient | undefined;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A's tail: slower work, then a passing failure (its own statement timeout): 503. */
async function slowThenFail(slow: boolean) {
  if (!slow) return;
  await sleep(400);
  await pool.query(`SET LOCAL statement_timeout = '50ms'`);
  await pool.query('SELECT pg_sleep(0.3)');
}

@Controller('orders')
class OrdersController {
  /** A client taken in each request. */
  @Post('each')
  @HttpCode(201)
  @Idempotent()
  async each(@Body() { sku, slow }: { sku: string; slow: boolean }) {
    const client = await pool.connect();
    try {
      await client.query(`INSERT INTO orders (sku) VALUES ($1)`, [sku]);
    } finally {
      client.release();
    }
    await slowThenFail(slow);
    return { sku };
  }

  /** A client taken by the first request and kept. */
  @Post('kept')
  @HttpCode(201)
  @Idempotent()
  async kept(@Body() { sku, slow }: { sku: string; slow: boolean }) {
    kept ??= await pool.connect();
    await kept.query(`INSERT INTO orders (sku) VALUES ($1)`, [sku]);
    await slowThenFail(slow);
    return { sku };
  }
}

describe("adversary 103 pool: a client kept from a running request runs another request's writes", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv103_pool_kept_client_other', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(route: 'each' | 'kept', sku: string, slow: boolean) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/orders/${route}`)
      .set('Idempotency-Key', `key-${route}-${sku}`)
      .send({ sku, slow })
      .timeout(20_000);
    const body = answer.body as { code?: string; sku?: string };
    return { status: answer.status, answer: body.code ?? body.sku };
  }

  async function skus() {
    const { rows } = await fixture.admin.query<{ sku: string }>(
      `SELECT sku FROM orders ORDER BY sku`,
    );
    return rows.map((row) => row.sku);
  }

  /** A (slow, fails) and, 100 ms into it, B (fast); then B's retry. */
  async function race(route: 'each' | 'kept', a: string, b: string) {
    const first = post(route, a, true);
    await sleep(100);
    const other = await post(route, b, false);
    const failed = await first;
    await sleep(300);
    const retried = await post(route, b, false);
    return { a: failed, b: other, bRetried: retried };
  }

  it("control: a client taken in each request keeps B's write when A rolls back", async () => {
    const outcome = await race('each', 'each-A', 'each-B');
    expect({ ...outcome, kept: await skus() }).toEqual({
      a: { status: 503, answer: 'database_transient' },
      b: { status: 201, answer: 'each-B' },
      bRetried: { status: 201, answer: 'each-B' },
      kept: ['each-B'],
    });
  }, 60_000);

  it("a client kept from a running request never puts another request's write in its transaction", async () => {
    const outcome = await race('kept', 'kept-A', 'kept-B');
    const kept = (await skus()).filter((sku) => sku.startsWith('kept-'));
    // Refused at once (B answers 500, nothing of B kept) would hold the promise too.
    if (outcome.b.status === 500 && !kept.includes('kept-B')) return;
    expect({ ...outcome, kept }).toEqual({
      a: { status: 503, answer: 'database_transient' },
      b: { status: 201, answer: 'kept-B' },
      bRetried: { status: 201, answer: 'kept-B' },
      kept: ['kept-B'],
    });
  }, 60_000);
});
