/**
 * Adversary 116 (pool): a listener of an `EventEmitterAsyncResource` made at boot (Node's own
 * way to keep an emitter's listeners in a context of their own) runs in the boot's async
 * context, in no request's scope. Its `pool.query()`, awaited by the handler, waits for a
 * second connection of the pool while the request holds one, with no bound. Eight requests at
 * once on a pool of four: every connection is held by a request waiting for one more; none is
 * ever answered (no 503, no Retry-After), the app is stuck until its sessions are killed.
 * A callback bound at boot (`AsyncResource.bind`, `AsyncLocalStorage.snapshot()` taken at
 * module load) runs in no scope the same way (an exploration run of all three at once hung
 * too; not separately pinned here).
 *
 * User code:
 *   const bus = new EventEmitterAsyncResource({ name: 'orders' });       // module level
 *   bus.on('order', (sku, done) => done(pool.query('INSERT INTO orders …', [sku, 'async'])));
 *   @Post('idempotent') @Idempotent() async place({ sku }) {
 *     await pool.query('INSERT INTO orders …', [sku, 'handler']);
 *     await sleep(100);
 *     await new Promise((resolve) => bus.emit('order', sku, resolve));
 *     return { sku };
 *   }
 *   8 concurrent POSTs, new keys, pool max 4.
 *
 * Code path: lib/transaction/bounded-connect.ts `boundedConnect` (`transactionScope.getStore()
 * ?.connectDeadline?.(this)`: undefined with no scope, so `pool.connect` waits as long as the
 * pool says, for ever by default); lib/transaction/request-frame.ts (the listener's frame is
 * the boot's: no context, no scope, no try); lib/data-layers/outside-scope.ts `connectDeadline`
 * (only work in `IdempotentTransaction.outside()` is bounded).
 *
 * Docs quote: data-layers.md: "Work the handler awaits there takes a second connection of the
 * pool while the request holds one: with as many such requests at once as the pool has
 * connections, none would be given back. That wait is bounded by `databaseTimeoutMs`: past it
 * the work fails with a `DatabaseDeadlineError`, the request rolls back and answers 503
 * `store_unavailable` … and the burst drains." options.md: `databaseTimeoutMs` is the "upper
 * bound on each wait the library makes on PostgreSQL: a pooled connection". Promise: outages
 * answered 503 with Retry-After, never a hang.
 *
 * Severity: high (a permanent hang of every request of the burst and of the app: no answer,
 * no 503 to retry on, connections never given back; the same code without the library
 * answers 201, as the control shows; not the known "guard runners starving the pool": no
 * guard, no runner, a Node built-in that keeps its creation's context).
 *
 * Fails now: 8 POSTs at once on the idempotent route: four (or so) answer 201, the others get
 * no answer within 20 s (4 x databaseTimeoutMs), until the test kills the app's sessions.
 *
 * Controls: the same burst with a plain EventEmitter (its listener runs in the request's
 * frame, joins its transaction) answers 8 x 201; the EventEmitterAsyncResource on a route
 * without `@Idempotent()` answers 8 x 201 (each `pool.query` takes and gives back a
 * connection; nothing is held while waiting).
 *
 * Suggested fix: bound a pool wait made in no scope while a request of the process holds a
 * connection of the same pool as `outside()`'s is (the deadline of the oldest such request, or
 * `databaseTimeoutMs`), so the awaiting request rolls back with 503 and the burst drains; or
 * run such a wait with no scope as `OutsideScope.of(undefined)` bounded per pool; at least say
 * in data-layers.md that work in no scope awaited by a handler (EventEmitterAsyncResource,
 * `AsyncResource.bind` / `snapshot()` made at boot) is not bounded, and to use `outside()`.
 */
import { EventEmitter, EventEmitterAsyncResource } from 'node:events';
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type Done = (written: Promise<unknown>) => void;
const write = (sku: string, via: string) =>
  pool.query(`INSERT INTO orders (sku, via) VALUES ($1, $2)`, [sku, via]);

/** Module-level buses, made at boot: a plain one, and one that keeps its creation's context. */
const plainBus = new EventEmitter();
plainBus.on('order', (sku: string, done: Done) => done(write(sku, 'plain')));
const asyncBus = new EventEmitterAsyncResource({ name: 'orders' });
asyncBus.on('order', (sku: string, done: Done) => done(write(sku, 'async')));

async function place(sku: string, bus: EventEmitter) {
  await write(sku, 'handler');
  await sleep(100);
  await new Promise<unknown>((resolve) => bus.emit('order', sku, resolve));
  return { sku };
}

@Controller('orders')
class OrdersController {
  @Post('idempotent')
  @HttpCode(201)
  @Idempotent()
  async idempotent(@Body() { sku, async }: { sku: string; async: boolean }) {
    return place(sku, async ? asyncBus : plainBus);
  }

  @Post('plain')
  @HttpCode(201)
  async plain(@Body() { sku, async }: { sku: string; async: boolean }) {
    return place(sku, async ? asyncBus : plainBus);
  }
}

describe('adversary 116 pool: an EventEmitterAsyncResource listener starves the pool', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp(`adv116_pool_async_emitter`, {
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
  }, 60_000);

  async function post(route: string, sku: string, async: boolean) {
    try {
      const answer = await request(fixture.app.getHttpServer())
        .post(`/orders/${route}`)
        .set('Idempotency-Key', `key-${sku}`)
        .send({ sku, async })
        .timeout(20_000);
      return String(answer.status);
    } catch {
      return 'no answer in 20 s';
    }
  }

  /** Eight requests at once (the pool has four connections); then unsticks what is stuck. */
  async function burst(route: string, prefix: string, async: boolean) {
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => post(route, `${prefix}-${i}`, async)),
    );
    // Whatever still waits is freed: the app's sessions ended (its connections then fail).
    await fixture.admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    await sleep(500);
    const counts: Record<string, number> = {};
    for (const a of answers) counts[a] = (counts[a] ?? 0) + 1;
    return counts;
  }

  it('control: the plain emitter, and the async one on a route without the library, answer', async () => {
    expect(await burst('idempotent', 'plain', false)).toEqual({ 201: 8 });
    expect(await burst('plain', 'nolib', true)).toEqual({ 201: 8 });
  }, 120_000);

  it.skip('the async emitter on an idempotent route answers, 201 or 503 (Not fixed (round 116): found by review)', async () => {
    const counts = await burst('idempotent', 'async', true);
    expect(Object.keys(counts).filter((status) => status !== '201' && status !== '503')).toEqual(
      [],
    );
  }, 120_000);
});
