/**
 * Fixed (session of 2026-12-07): lib/transaction/foreign-thenable.ts `startedInside` binds the
 * lazy async iterables a native Promise returned by `work()` resolves to (its `then()` called
 * in the outside scope, so `boundHere` binds there), and those found one level into an array
 * or object literal, returned or resolved to (`iterablesBoundHere`, table in
 * foreign-thenable.spec.ts); data-layers.md and kysely.md say so.
 *
 * Adversary 104 (pool): a Kysely stream returned from an async callback of
 * `IdempotentTransaction.outside()` is not read outside the request.
 *
 * User code:
 *   @Post() @Idempotent()
 *   async copy(@Body() { sku }) {
 *     const rows = await IdempotentTransaction.outside(async () => {
 *       await this.warm();                                   // anything awaited first
 *       return db.selectFrom('items').select('id').stream(2);
 *     });
 *     for await (const row of rows) await db.insertInto('orders').values({ sku, via: row.id }).execute();
 *     return { sku };
 *   }
 *
 * Code path: lib/idempotent-transaction.service.ts `outside()` -> lib/transaction/foreign-thenable.ts
 * `startedInside` binds a lazy async iterable only when `work()` returns it itself: an async
 * callback returns a native Promise, which is passed as is, and the stream it resolves to is
 * iterated in the request's scope (bound-iterable.ts `boundHere` never applied): its cursor
 * opens on the request's connection and the first write per row is refused (`cursor_open`).
 *
 * Docs quote: data-layers.md: "a lazy stream returned from it (Kysely's `stream()`, an async
 * generator) is read inside it wherever it is iterated: on a connection of its own, so that the
 * handler may write per streamed row"; kysely.md: "make it in
 * `IdempotentTransaction.outside(() => db…stream())`, which reads it on a connection of its own
 * wherever it is iterated".
 *
 * Severity: medium (a false refusal: 500 cursor_open, rolled back, nothing stored; the same
 * code works without the library and with a sync callback).
 *
 * Fails now: the async form answers 500 `cursor_open`; the sync form (control) answers 201.
 * The same refusal (seen in review, not in this file) for a stream returned in an array
 * (`outside(() => [db…stream()])`, as thenables are started in an array), in an object
 * (`outside(() => ({ rows: db…stream() }))`) and as `outside(() => Promise.resolve(db…stream()))`.
 *
 * Suggested fix: in `startedInside`, when `work()` returns a native Promise, bind a lazy async
 * iterable it resolves to (`result.then((value) => startedInside(value))`), or say in the docs
 * that only a callback returning the stream itself (not `async`) is read outside.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect } from 'kysely';
import { type Pool } from 'pg';
import Cursor from 'pg-cursor';
import request from 'supertest';
import { IdempotencyModule, Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  items: { id: number };
  orders: { id: string; sku: string; via: string };
}

let pool: Pool;
let db: Kysely<Db>;

async function copyStreamed(sku: string, rows: AsyncIterable<{ id: number }>) {
  for await (const row of rows) {
    await db
      .insertInto('orders')
      .values({ sku, via: String(row.id) } as never)
      .execute();
  }
  return { sku };
}

@Controller('orders')
class OrdersController {
  /** The stream returned from a sync callback (documented). */
  @Post('sync')
  @HttpCode(201)
  @Idempotent()
  async sync(@Body() { sku }: { sku: string }) {
    const rows = await IdempotentTransaction.outside(() =>
      db.selectFrom('items').select('id').orderBy('id').stream(2),
    );
    return copyStreamed(sku, rows);
  }

  /** The same stream returned from an async callback. */
  @Post('async')
  @HttpCode(201)
  @Idempotent()
  async asyncForm(@Body() { sku }: { sku: string }) {
    const rows = await IdempotentTransaction.outside(async () => {
      await Promise.resolve();
      return db.selectFrom('items').select('id').orderBy('id').stream(2);
    });
    return copyStreamed(sku, rows);
  }
}

describe('adversary 104 pool: a stream from an async outside() callback is read in the request', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv104_pool_outside_async_stream', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = new Kysely<Db>({ dialect: new PostgresDialect({ pool: started, cursor: Cursor }) });
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE items (id int PRIMARY KEY)`);
        await owner.query(`INSERT INTO items SELECT generate_series(1, 5)`);
        await owner.query(
          `CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL, via text NOT NULL)`,
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(route: string, sku: string) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/orders/${route}`)
      .set('Idempotency-Key', `key-${route}-${sku}`)
      .send({ sku })
      .timeout(20_000);
    const body = answer.body as { code?: string; sku?: string };
    return { status: answer.status, answer: body.code ?? body.sku };
  }

  async function count(sku: string) {
    const { rows } = await fixture.admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM orders WHERE sku = $1`,
      [sku],
    );
    return rows[0].n;
  }

  it('control: a stream returned from a sync outside() callback copies and replays', async () => {
    const first = await post('sync', 'sync-1');
    const retried = await post('sync', 'sync-1');
    expect({ first, retried, rows: await count('sync-1') }).toEqual({
      first: { status: 201, answer: 'sync-1' },
      retried: { status: 201, answer: 'sync-1' },
      rows: 5,
    });
  }, 60_000);

  it('a stream returned from an async outside() callback is read outside the request', async () => {
    const first = await post('async', 'async-1');
    const retried = await post('async', 'async-1');
    expect({ first, retried, rows: await count('async-1') }).toEqual({
      first: { status: 201, answer: 'async-1' },
      retried: { status: 201, answer: 'async-1' },
      rows: 5,
    });
  }, 60_000);
});
