/**
 * Fixed (session of 2026-12-06, seventh): `startedInside` binds a lazy async iterable returned
 * from `outside()` (Kysely's `stream()`, an async generator) to the outside scope (`boundHere`,
 * lib/transaction/bound-iterable.ts): its `[Symbol.asyncIterator]()`, `next()`, `return()` and
 * `throw()` run there, so its `pool.connect()` and cursor are a connection of its own wherever
 * it is iterated.
 *
 * Adversary 103 (pool): a Kysely `stream()` returned from `IdempotentTransaction.outside()` is
 * not started there. Kysely's stream is lazy (an async iterator whose query is sent at the
 * first `next()`), so it runs where the handler iterates it: on the request's own connection,
 * inside the request's transaction. A write per streamed row, which is why the read was put in
 * `outside()` (a connection of its own, as without the library), is then refused with
 * `CursorOpenRefusedError`: 500 `cursor_open`, whose message says the cursor was "open on this
 * request's connection", and every retry meets the same refusal: the route can never succeed.
 *
 * User code:
 *   @Post() @Idempotent()
 *   async copy(@Body() { sku }) {
 *     // the read on a connection of its own, so that writing per row does not wait for it
 *     const rows = await IdempotentTransaction.outside(() =>
 *       db.selectFrom('items').select('id').stream(2));
 *     for await (const row of rows) {
 *       await db.insertInto('orders').values({ sku, via: String(row.id) }).execute();
 *     }
 *     return { sku };
 *   }
 *
 * Code path: lib/idempotent-transaction.service.ts `outside` -> `startedInside` (starts a
 * thenable, a builder, or an array of them, but not an async iterable: Kysely's
 * `stream()` returns an async generator whose body, and so its `pool.connect()` and cursor,
 * runs in the async context of whoever calls `next()`); lib/data-layers/pool-transaction.ts
 * and open-streams.ts (the cursor is the request's; the write behind it is refused).
 *
 * Docs quote: lib/idempotent-transaction.service.ts: "Runs `work` outside any idempotent
 * request: its database work commits on its own, now or whenever it runs."
 * docs/guides/data-layers.md: "Work that is not the request's ...: run it in
 * `IdempotentTransaction.outside(() => …)`, which leaves the request's scope; a query returned
 * unawaited from it (a builder, a Prisma query) is started inside it."; "Read the stream to its
 * end before writing ... or read the rows with `execute()`" (the advice for a stream on the
 * request's connection, which this one was not meant to be).
 *
 * Severity: medium (no effect twice and nothing kept, but a documented way to take a read off
 * the request's connection fails for good: 500 `cursor_open` for every try, with a message that
 * names the wrong cause; without the library the same code answers 201).
 *
 * Fails now: 500 `cursor_open` on the first try and on the retry, no order kept. Controls: the
 * same loop over `execute()` rows read in `outside()` answers 201 and replays it; the same
 * stream code without `@Idempotent()` answers 201 with a row per item.
 *
 * Suggested fix: in `startedInside`, an async iterable returned from `outside()` (an object
 * with `Symbol.asyncIterator`, Kysely's stream, pg-query-stream) is bound to the outside
 * scope: its `next()`, `return()` and `throw()` run in that scope's async context
 * (`AsyncResource.bind`), so its connection and cursor are its own; or say in data-layers.md
 * and kysely.md that a stream returned from `outside()` runs where it is iterated.
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
  /** The stream, returned from `outside()`. */
  @Post('outside-stream')
  @HttpCode(201)
  @Idempotent()
  async outsideStream(@Body() { sku }: { sku: string }) {
    const rows = await IdempotentTransaction.outside(() =>
      db.selectFrom('items').select('id').orderBy('id').stream(2),
    );
    return copyStreamed(sku, rows);
  }

  /** The rows read whole in `outside()`. */
  @Post('outside-execute')
  @HttpCode(201)
  @Idempotent()
  async outsideExecute(@Body() { sku }: { sku: string }) {
    const rows = await IdempotentTransaction.outside(() =>
      db.selectFrom('items').select('id').orderBy('id').execute(),
    );
    for (const row of rows) {
      await db
        .insertInto('orders')
        .values({ sku, via: String(row.id) } as never)
        .execute();
    }
    return { sku };
  }

  /** The same stream code without the library. */
  @Post('plain-stream')
  @HttpCode(201)
  plainStream(@Body() { sku }: { sku: string }) {
    return copyStreamed(sku, db.selectFrom('items').select('id').orderBy('id').stream(2));
  }
}

describe('adversary 103 pool: a Kysely stream returned from outside() runs in the request', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv103_pool_outside_stream', {
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

  it('control: rows read whole in outside() copy and replay; the stream without the library copies', async () => {
    const first = await post('outside-execute', 'exec-1');
    const retried = await post('outside-execute', 'exec-1');
    const plain = await post('plain-stream', 'plain-1');
    expect({
      first,
      retried,
      plain,
      kept: await count('exec-1'),
      plainKept: await count('plain-1'),
    }).toEqual({
      first: { status: 201, answer: 'exec-1' },
      retried: { status: 201, answer: 'exec-1' },
      plain: { status: 201, answer: 'plain-1' },
      kept: 5,
      plainKept: 5,
    });
  }, 60_000);

  it('a stream returned from outside() runs on a connection of its own', async () => {
    const first = await post('outside-stream', 'stream-1');
    const retried = await post('outside-stream', 'stream-1');
    expect({ first, retried, kept: await count('stream-1') }).toEqual({
      first: { status: 201, answer: 'stream-1' },
      retried: { status: 201, answer: 'stream-1' },
      kept: 5,
    });
  }, 60_000);
});
