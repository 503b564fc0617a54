import { Body, Controller, Module, Post } from '@nestjs/common';
import { EventEmitter } from 'node:events';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): the
 * handler places an order and emits `order.placed`; a listener records a shipping request in
 * `db.transaction(…)`, deferred off the request's path as event buses do
 * (`@nestjs/event-emitter`'s `@OnEvent(…, { async: true })` runs its listener from
 * `setImmediate`; a `setTimeout(…, 0)` or `process.nextTick` does the same). It is work the
 * handler left running, of which docs/guides/data-layers.md says: "After the answer committed,
 * work the handler left running (a promise it did not await) runs on its own; ... A statement
 * of it sent while the commit is under way waits for the commit's outcome".
 *
 * What happens: the listener runs while the library commits the request (right after the
 * handler returned). `pool.connect()` in the request's scope still joins
 * (pool-transaction.ts:130, `joinedPool`: ended but not settled), and the view's `BEGIN` goes
 * to `onView` (pool-transaction.ts:421: `if (this.ended) return this.apart(true, …)`), which
 * takes it for a nested transaction opened before the end: `apart(true)`
 * (request-transaction.ts:763-767) waits for the commit and throws `TransactionEndedError(true)`
 * although the request committed ("committed while a nested transaction of work it left
 * running was open", which it was not: it began after). The listener's effect is lost for
 * good: the request answered 201 and committed, its retry replays the 201, and nothing ever
 * records the shipping request. Every time, not by chance: setImmediate, nextTick and
 * setTimeout(0) all land in the commit. The same listener run 300 ms later (after the commit
 * settled) runs on its own; a plain `db.execute` at the same moment waits and runs. Only a
 * transaction begun while the commit is under way is refused (Kysely's `transaction()` and
 * Prisma's interactive `$transaction` begin through the same view and the same line).
 *
 * What should happen: as without the library and as the guide says: the listener's
 * transaction waits for the commit's outcome and, the request having committed, runs on its
 * own: one shipping row.
 *
 * Controls (pass): the same statement without a transaction at the same moment, and the same
 * transaction 300 ms later: one row each.
 *
 * Severity: high (bordering critical): an effect of the app's code is lost for ever with the
 * request answered 201 and replayed 201; a well-worn idiom (an async event listener).
 */
let db: NodePgDatabase;
const failures: string[] = [];
const events = new EventEmitter();

type How = 'transaction' | 'statement' | 'transaction-later';

events.on('order.placed', (id: string, how: How) => {
  const record = () => {
    const run =
      how === 'statement'
        ? db.execute(sql`INSERT INTO shipping (order_id) VALUES (${id})`)
        : db.transaction(async (tx) => {
            await tx.execute(sql`INSERT INTO shipping (order_id) VALUES (${id})`);
          });
    void Promise.resolve(run).catch((error: unknown) => {
      // Drizzle wraps the driver's error: its cause is the library's refusal.
      const cause = (error as { cause?: Error }).cause ?? (error as Error);
      failures.push(`${id}: ${cause.name}`);
    });
  };
  // An async listener of an event bus: run from setImmediate, off the request's path.
  if (how === 'transaction-later') setTimeout(record, 300);
  else setImmediate(record);
});

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  async place(@Body() body: { id: string; how: How }) {
    await db.execute(sql`INSERT INTO orders (id) VALUES (${body.id})`);
    events.emit('order.placed', body.id, body.how);
    return { id: body.id, status: 'placed' };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [OrdersController],
})
class OrdersModule {}

let pool: Pool;
const poolOf = () => pool;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('adversary 43c: a transaction left running that begins while the request commits', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv43c_left_running_tx', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id text PRIMARY KEY)');
        await admin.query('CREATE TABLE shipping (order_id text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const placeTwice = async (id: string, how: How) => {
    const call = () =>
      request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', `key-${id}`)
        .send({ id, how });
    const first = await call();
    await sleep(800);
    const retry = await call();
    const { rows } = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM shipping WHERE order_id = $1',
      [id],
    );
    return {
      first: first.status,
      retry: retry.status,
      replayed: retry.headers['idempotent-replayed'],
      shipping: rows[0].n as number,
      failures: failures.filter((failure) => failure.startsWith(`${id}:`)),
    };
  };

  const once = { first: 201, retry: 201, replayed: 'true', shipping: 1, failures: [] };

  it('control: a plain statement of the listener at the same moment waits and runs: one row', async () => {
    expect(await placeTwice('order-s', 'statement')).toEqual(once);
  }, 30_000);

  it('control: the same transaction 300 ms later runs on its own: one row', async () => {
    expect(await placeTwice('order-l', 'transaction-later')).toEqual(once);
  }, 30_000);

  it('the listener’s db.transaction, begun while the request commits, runs on its own: one row', async () => {
    expect(await placeTwice('order-t', 'transaction')).toEqual(once);
  }, 30_000);
});
