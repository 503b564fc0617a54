/**
 * Adversary 116 (pool): the listener of an `EventEmitterAsyncResource` made at module level
 * (Node's own emitter that runs its listeners in its creation's async context) runs in the
 * boot's frame: no request context, no transaction scope, no try. Its write, awaited by an
 * idempotent handler, is sent in no scope and commits on its own at once. The first try fails
 * with a passing failure (503, rolled back, key given back), the retry runs the listener
 * again: two rows for one key, one stored 201. Nothing refuses it or says so; the docs send
 * such work to `outside()` only when it is "not the request's own".
 *
 * User code:
 *   const bus = new EventEmitterAsyncResource({ name: 'orders' });        // module level
 *   bus.on('order', (sku, done) => done(pool.query('INSERT INTO orders …', [sku, 'listener'])));
 *   @Post() @Idempotent() async place({ sku }) {
 *     await pool.query('INSERT INTO orders …', [sku, 'handler']);
 *     await new Promise((resolve) => bus.emit('order', sku, resolve));
 *     ... first try: a passing failure (its statement_timeout) -> 503, key given back
 *     return { sku };
 *   }
 *
 * Code path: lib/transaction/request-frame.ts (the listener runs in the frame the emitter's
 * AsyncResource captured at boot: `transactionScope.getStore()` undefined);
 * lib/data-layers/pool-join.ts (`joined`/scope lookups: no scope, the pool's own connection);
 * lib/idempotent.decorator.ts (the try's outcome waited for, not the listener's statement).
 *
 * Docs quote: transactions.md: "Work a handler starts and does not await (an event listener,
 * a timer) joins the request's transaction while it is open."; data-layers.md: "The request
 * a statement belongs to is the one in whose async context it is sent." The promise: a
 * retried request never runs the effect twice. Here the listener is awaited by the handler,
 * during the request, and its effect is not the request's: nothing in the docs says an
 * `EventEmitterAsyncResource` (or a callback bound at boot with `AsyncResource.bind` /
 * `AsyncLocalStorage.snapshot()`) leaves the request.
 *
 * Severity: high (double effect: the listener's row written by the failed try and again by the
 * retry, under one key whose 201 replays).
 *
 * Fails now: statuses [503, 201, 201]; rows of the key: handler once, listener twice.
 *
 * Controls: the same code with a plain `EventEmitter` (its listener runs in the emitter's
 * caller's frame, the request's): [503, 201, 201], handler once, listener once.
 *
 * Suggested fix: a statement sent in no scope while it is awaited by a request cannot be told
 * by AsyncLocalStorage alone; so at least say it in transactions.md / data-layers.md (an
 * `EventEmitterAsyncResource`, a callback bound or a snapshot taken at boot run their work in
 * their creation's context, outside the request: emit on a plain `EventEmitter`, or make the
 * resource per request); better, note the frame the handler's try runs in on the Promise a
 * listener hands back (wrap `EventEmitterAsyncResource.prototype.emit` /
 * `AsyncResource.prototype.runInAsyncScope` while a request's frame is current) and refuse or
 * warn once when a pool statement is sent in no scope from inside such a call.
 */
import { EventEmitter, EventEmitterAsyncResource } from 'node:events';
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;

type Done = (written: Promise<unknown>) => void;
const write = (sku: string, via: string) =>
  pool.query(`INSERT INTO orders (sku, via) VALUES ($1, $2)`, [sku, via]);

/** Module-level buses, made at boot: a plain one, and one that keeps its creation's context. */
const plainBus = new EventEmitter();
plainBus.on('order', (sku: string, done: Done) => done(write(sku, 'listener')));
const asyncBus = new EventEmitterAsyncResource({ name: 'orders' });
asyncBus.on('order', (sku: string, done: Done) => done(write(sku, 'listener')));

/** The first try of each key meets a passing failure after its writes (a 503 to retry). */
const tried = new Set<string>();

@Controller('orders')
class OrdersController {
  @Post()
  @HttpCode(201)
  @Idempotent()
  async place(@Body() { sku, async }: { sku: string; async: boolean }) {
    await write(sku, 'handler');
    await new Promise<unknown>((resolve) =>
      (async ? asyncBus : plainBus).emit('order', sku, resolve),
    );
    if (!tried.has(sku)) {
      tried.add(sku);
      await pool.query(`SET LOCAL statement_timeout = '50ms'`);
      await pool.query('SELECT pg_sleep(0.3)');
    }
    return { sku };
  }
}

describe("adversary 116 pool: an EventEmitterAsyncResource listener's write escapes the request", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp(`adv116_pool_async_emitter_escape`, {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (owner) => {
        await owner.query(
          `CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL, via text NOT NULL)`,
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(sku: string, async: boolean) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/orders`)
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku, async })
      .timeout(20_000);
    return answer.status;
  }

  /** The first try (503), its retry (201), a replay (201); then the rows of `sku`. */
  async function retried(sku: string, async: boolean) {
    const statuses = [await post(sku, async), await post(sku, async), await post(sku, async)];
    const { rows } = await fixture.admin.query<{ via: string }>(
      `SELECT via FROM orders WHERE sku = $1 ORDER BY via`,
      [sku],
    );
    return { statuses, rows: rows.map((row) => row.via) };
  }

  it("control: a plain emitter's listener writes once, with the retry's answer", async () => {
    expect(await retried('plain', false)).toEqual({
      statuses: [503, 201, 201],
      rows: ['handler', 'listener'],
    });
  }, 60_000);

  it.skip("the async emitter's listener writes once (Not fixed (round 116): found by review)", async () => {
    expect(await retried('async', true)).toEqual({
      statuses: [503, 201, 201],
      rows: ['handler', 'listener'],
    });
  }, 60_000);
});
