/**
 * Adversary 80 (pool): a read bounded by a Kysely `signal` with the default `'ignore query'`
 * strategy (the one the Kysely guide says to leave) does not bound the request: the handler
 * gives up on the read and answers at once, but the answer's store and `COMMIT` queue behind
 * the abandoned read on the request's one connection. A read longer than `databaseTimeoutMs`
 * makes every try answer 503 `store_unavailable` (`Retry-After: 1`), the order never placed,
 * for ever; a shorter one delays the answer by its whole length.
 *
 *   @Post() @Idempotent()
 *   async place(@Body() { sku }) {
 *     await db.insertInto('orders').values({ sku }).execute();
 *     try { // a best-effort enrichment, given up on after 300 ms
 *       await sql`SELECT 1 AS n FROM pg_sleep(4)`.execute(db, { signal: AbortSignal.timeout(300) });
 *     } catch { }
 *     return { sku };
 *   }
 *
 * Why: with `'ignore query'` Kysely (query-executor-base.js `executeQuery`) rejects with the
 * signal's reason and leaves the statement running. Without the library it runs on a pool
 * connection of its own, which nobody waits for. Under the library every statement after the
 * first write runs on the request's connection (lib/data-layers/pool-transaction.ts
 * `statement` -> `RequestTransaction.send`); the library's own statements at the end (the
 * fenced store of the answer, `COMMIT`) are sent behind it, bounded by `databaseTimeoutMs`;
 * past it the wait is a 503 (`store_unavailable`), the transaction dropped. The retry runs the
 * same read and meets the same wait. Nothing in the seam knows that a statement still running
 * on the connection was given up on by its code (no cancel was asked), so nothing stops it.
 *
 * Docs: docs/guides/kysely.md: "Bound a read in the request with `SET LOCAL statement_timeout`
 * (a timeout is a passing failure, answered 503 once) or leave the default `'ignore query'`";
 * README/design: nothing hangs, a 503 is a passing failure that a retry gets past. Here the
 * recommended bound bounds nothing, and the 503 is answered to every retry.
 *
 * Severity: high (an ordinary, documented way to bound a read makes the route answer 503 for
 * ever, each try holding the key and the request's connection for `databaseTimeoutMs`; with a
 * read shorter than that, the answer waits for the read the handler gave up on).
 *
 * Fails now: with `databaseTimeoutMs: 1500` and a 4 s read given up on after 300 ms, the first
 * try and its retry both answer 503 `store_unavailable` after ~1.5 s, no order kept. Control:
 * the same route whose read ends before its signal answers 201 and replays it; the same code
 * without `@Idempotent()` answers 201 in ~300 ms.
 *
 * Suggested fix: a statement of the handler's still running when the handler has answered is
 * work nobody awaits: before the store and `COMMIT`, cancel it on the server (a protocol
 * cancel of the request's backend, as the deadline does) and roll it back to a savepoint taken
 * before it, or refuse the commit at once with a clear 500 that names the abandoned statement
 * (not a 503 the retry meets again); and say in the Kysely guide that `'ignore query'` leaves the
 * statement on the request's connection, in front of its commit.
 *
 * Changed (fixer): the library waits for it. Kysely's `'ignore query'` hands the driver no
 * signal, so the library cannot tell a statement given up on from one left running on purpose
 * (a write not awaited, which without the library commits, and here commits with the answer),
 * and it cannot stop one without aborting the request's transaction (a cancel ends the
 * transaction, not the statement; a savepoint before every statement would cost each a round
 * trip): cancelling would turn the route into a 500 for ever, and lose the order. Waiting is
 * what the handler's awaited statements get: their time is the handler's, bounded by
 * `statement_timeout`, while `databaseTimeoutMs` bounds the library's own waits; the 503 came
 * from counting the handler's statement against that deadline, an outage that was none. So the
 * answer is 201, after the read (the test's title kept: the request is no longer refused, but
 * its answer waits for the read, as docs/guides/kysely.md and transactions.md now say; run a
 * read that may be given up on in `outside()`).
 * Fixed: lib/transaction/request-transaction.ts `send` notes its code's statements on the
 * request's connection; `commitNow` and `commitPlainNow` await them (`codeStatementsDone`)
 * before the stored answer and `COMMIT`, whose deadline starts then, and so does `undoEffects`
 * before its `ROLLBACK TO SAVEPOINT` (a `oneCommit` route's error stored without its effects:
 * the third case, added by the fixer, answered 503 for ever before).
 */
import { BadRequestException, Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  orders: { id: string; sku: string };
}

let pool: Pool;
let db: Kysely<Db>;

async function placeOrder(sku: string, readSeconds: number) {
  await db
    .insertInto('orders')
    .values({ sku } as never)
    .execute();
  try {
    // A best-effort enrichment, given up on after 300 ms (Kysely's default 'ignore query').
    await sql<{ n: number }>`SELECT 1 AS n FROM pg_sleep(${readSeconds})`.execute(db, {
      signal: AbortSignal.timeout(300),
    });
  } catch {
    // given up on: answer without it
  }
  return { sku };
}

@Controller('orders')
class OrdersController {
  @Post('keyed')
  @HttpCode(201)
  @Idempotent()
  keyed(@Body() body: { sku: string; readSeconds: number }) {
    return placeOrder(body.sku, body.readSeconds);
  }

  /**
   * The same code, then refused, on a route whose claim commits with the answer: its error
   * stored with the claim, its effects undone (to the claim's savepoint) behind the read.
   */
  @Post('refused')
  @HttpCode(201)
  @Idempotent({ oneCommit: true })
  async refused(@Body() body: { sku: string; readSeconds: number }) {
    await placeOrder(body.sku, body.readSeconds);
    throw new BadRequestException('out of stock');
  }

  /** The same code without the library. */
  @Post('plain')
  @HttpCode(201)
  plain(@Body() body: { sku: string; readSeconds: number }) {
    return placeOrder(body.sku, body.readSeconds);
  }
}

describe("adversary 80 pool: a read given up on with Kysely's 'ignore query' holds the commit", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1_500 }),
        }),
      ],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv80_pool_ignored_abort', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = new Kysely<Db>({ dialect: new PostgresDialect({ pool: started }) });
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(route: 'keyed' | 'plain' | 'refused', sku: string, readSeconds: number) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/orders/${route}`)
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku, readSeconds })
      .timeout(30_000);
    const body = answer.body as { code?: string; sku?: string; message?: string };
    return { status: answer.status, answer: body.code ?? body.sku ?? body.message };
  }

  async function kept(sku: string) {
    const { rows } = await fixture.admin.query(`SELECT 1 FROM orders WHERE sku = $1`, [sku]);
    return rows.length;
  }

  /** Until no read of the app's is still sleeping (one given up on runs to its end). */
  async function readsDone() {
    for (let i = 0; i < 100; i += 1) {
      const { rows } = await fixture.admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE query LIKE '%pg_sleep%' AND state = 'active' AND pid <> pg_backend_pid()`,
      );
      if (rows[0].n === 0) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  it('control: a read that ends before its signal answers 201 and replays it; without the library the given-up read answers 201', async () => {
    const first = await post('keyed', 'keyed-short', 0.05);
    const retried = await post('keyed', 'keyed-short', 0.05);
    const started = Date.now();
    const plain = await post('plain', 'plain-long', 4);
    const plainMs = Date.now() - started;
    await readsDone();
    expect({ first, retried, kept: await kept('keyed-short'), plain }).toEqual({
      first: { status: 201, answer: 'keyed-short' },
      retried: { status: 201, answer: 'keyed-short' },
      kept: 1,
      plain: { status: 201, answer: 'plain-long' },
    });
    expect(plainMs).toBeLessThan(3_000);
  }, 60_000);

  it('a read given up on with the default strategy does not hold the request', async () => {
    const first = await post('keyed', 'keyed-long', 4);
    await readsDone();
    const retried = await post('keyed', 'keyed-long', 4);
    await readsDone();
    expect({ first, retried, kept: await kept('keyed-long') }).toEqual({
      first: { status: 201, answer: 'keyed-long' },
      retried: { status: 201, answer: 'keyed-long' },
      kept: 1,
    });
  }, 60_000);

  it("(fixer) the handler's error after a read given up on is stored without its effects, never a 503", async () => {
    const first = await post('refused', 'refused-long', 4);
    await readsDone();
    const retried = await post('refused', 'refused-long', 4);
    await readsDone();
    expect({ first, retried, kept: await kept('refused-long') }).toEqual({
      first: { status: 400, answer: 'out of stock' },
      retried: { status: 400, answer: 'out of stock' },
      kept: 0,
    });
  }, 60_000);
});
