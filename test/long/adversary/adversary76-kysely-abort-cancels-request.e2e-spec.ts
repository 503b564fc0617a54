/**
 * Adversary 76 (kysely): Kysely 0.29's query abort (`execute({ signal, inflightQueryAbortStrategy:
 * 'cancel query' })`), used to bound an optional slow read, cancels the request's whole
 * transaction under `@Idempotent()`: the handler catches the abort and answers as it does
 * without the library, but the request answers 503 `database_transient` ("Retry with the same
 * key"), and every retry meets the same 503: the order is never placed. Without the library the
 * cancel ends that one read and the order commits (201).
 *
 *   await db.insertInto('orders').values({ sku }).execute();
 *   let extras = null;
 *   try {
 *     // best effort, bounded: Kysely cancels the query on the server when the signal fires
 *     extras = (await sql`SELECT ... FROM slow_recommendations(...)`.execute(db, {
 *       signal: AbortSignal.timeout(300),
 *       inflightQueryAbortStrategy: 'cancel query',
 *     })).rows;
 *   } catch { /* answer without extras *\/ }
 *   await db.insertInto('order_log').values({ sku }).execute();
 *   return { sku, extras };
 *
 * Why: Kysely's `PostgresConnection.collectSessionInfo` reads the backend's pid with `select
 * pg_backend_pid()` (the pool seam's `JoinedClient` has no `processID`), which runs on the
 * request's one connection (lib/data-layers/pool-transaction.ts, `PoolTransaction.statement`);
 * on abort, its `cancelQuery` sends `pg_cancel_backend(pid)` from a control client: the
 * request's connection's statement fails with 57014 ("canceling statement due to user
 * request"), which aborts the REQUEST's transaction, not one statement's as on a connection of
 * its own. The handler never sees that failure (Kysely throws the signal's reason and logs the
 * query's error "in the background"); the library then finds the transaction aborted by a
 * 57014 and answers it as a passing failure (lib/transaction/failure.ts `isTransientError` →
 * `TransientDatabaseError`, 503 `database_transient`, nothing stored). The retry runs the same
 * code and meets the same cancel: 503 for ever.
 *
 * Docs: docs/guides/kysely.md builds Kysely on the library's pool and promises its queries
 * join the request; docs/guides/data-layers.md and transactions.md promise a 503 for "a
 * passing failure (a serialization failure, a deadlock, a lost connection)": "nothing is stored
 * and the retry runs once". A cancel the app asked for is no passing failure, and its retry
 * is not answered differently. Kysely's own docs: 'cancel query' "attempts to cancel the query
 * on the database side (e.g. `pg_cancel_backend` in PostgreSQL)": the query, not the
 * transaction of the code around it.
 *
 * Severity: medium (a false "retry later" answered for ever for code that works without the
 * library; the order the client asked for is never placed; nothing committed twice).
 *
 * Fails now: the keyed route answers 503 `database_transient` (`Retry-After`), and so does its
 * retry; no order, no key stored as done. With 'kill session' (`pg_terminate_backend` of the
 * request's connection, where without the library it ends that one pooled connection) the same
 * for ever, as 503 `store_unavailable`. Controls: the same route without `@Idempotent()`
 * answers 201 with the order and its log row; under the library, the same code with Kysely's
 * default strategy ('ignore query') answers 201 (after the read ends) with both rows.
 *
 * Suggested fix: a view's statement that its caller may abandon cannot share the request's
 * transaction unguarded. Either run each statement a view sends while an abort can reach it in
 * a savepoint of its own (a 57014 then rolls back that statement alone, as on a connection of
 * its own), or answer `select pg_backend_pid()` on a view with no backend to cancel (so 'cancel
 * query' degrades to 'ignore query'); at the least, tell a cancel "due to user request" from a
 * statement or lock timeout and answer 500 `transaction_aborted` naming it, not a 503 that the
 * retry meets again.
 *
 * Fixed ('cancel query'): a 57014 "due to user request" that the request's own code asked for
 * is no passing failure: the request answers 500 `transaction_aborted` (no `Retry-After`,
 * nothing stored), and docs/guides/kysely.md and data-layers.md say the rule: a statement on
 * the request's connection shares its transaction, so cancelling it (Kysely's 'cancel query'
 * or 'kill session') ends the request's transaction; bound a read with `statement_timeout`
 * (`SET LOCAL`) or run it in `IdempotentTransaction.outside()`. Running each abortable
 * statement in a savepoint of its own is not sound here: a view does not know which statement
 * a signal guards (Kysely asks the pid once per connection), and a savepoint per statement
 * would change every other statement's cost and failure handling.
 * Since adversary 77 the cancel is told to be the app's own by what the library sees, not by
 * the message alone (an operator's cancel has the same one, and is a passing failure): the
 * pool's client class is watched (lib/data-layers/cancel-watch.ts, installed with the pool's
 * join), so Kysely's control client (`new pool.Client()`) sending `pg_cancel_backend(<pid>)`
 * or `pg_terminate_backend(<pid>)` in the request's scope notes it on the request's
 * connection when the pid is its backend's (`RequestTransaction.cancelAsked`,
 * lib/connection/cancel-asked.ts); the errors that connection then meets for it are marked
 * (`markAskedByApp`) and `isCancelAskedForError` (lib/connection/connection-errors.ts) reads
 * the mark.
 * Changed (fixer): the 'cancel query' case expects that clear permanent answer (500
 * `transaction_aborted`, twice, nothing kept), not 201: its own cancel of the request's
 * connection cannot end one statement alone.
 * Fixed ('kill session'): the same watch tells the request's own `pg_terminate_backend` of its
 * connection from a server's shutdown (both 57P01): the connection's loss it asked for (the
 * 57P01, then "not queryable" on the statements after it) is marked the app's own and answered
 * 500 `transaction_aborted`, never 503 `store_unavailable` that every retry meets again; a
 * shutdown or an operator's terminate stays a 503.
 * Changed (fixer): the 'kill session' case expects that permanent answer (500
 * `transaction_aborted`, twice, nothing kept), not 201: the request's transaction lives on the
 * connection its own code ended, so nothing of it can commit; the order is placed once the
 * read is bounded another way (above).
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  orders: { id: string; sku: string };
  order_log: { id: string; sku: string };
}

type Strategy = 'cancel query' | 'kill session' | 'ignore query';

let pool: Pool;
let db: Kysely<Db>;

async function placeOrder(sku: string, strategy: Strategy) {
  await db
    .insertInto('orders')
    .values({ sku } as never)
    .execute();
  let extras: unknown = null;
  try {
    // A best-effort read bounded by a signal (a slow recommendation query).
    const { rows } = await sql<{ n: number }>`SELECT 1 AS n FROM pg_sleep(2)`.execute(db, {
      signal: AbortSignal.timeout(300),
      inflightQueryAbortStrategy: strategy,
    });
    extras = rows;
  } catch {
    extras = null;
  }
  await db
    .insertInto('order_log')
    .values({ sku } as never)
    .execute();
  return { sku, extras };
}

@Controller('orders')
class OrdersController {
  @Post('keyed')
  @HttpCode(201)
  @Idempotent()
  keyed(@Body() body: { sku: string; strategy: Strategy }) {
    return placeOrder(body.sku, body.strategy);
  }

  /** The control: the same code without the library. */
  @Post('plain')
  @HttpCode(201)
  plain(@Body() body: { sku: string; strategy: Strategy }) {
    return placeOrder(body.sku, body.strategy);
  }
}

describe('adversary 76 kysely: a query abort with cancel query cancels the request', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv76_kysely_abort_cancel', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = new Kysely<Db>({ dialect: new PostgresDialect({ pool: started }) });
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
        await owner.query(`CREATE TABLE order_log (id bigserial PRIMARY KEY, sku text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  // A 'kill session' case ends a backend whose client Kysely gives back to the pool before
  // node-postgres has seen it end: the next case's claim could meet that dead client (the
  // library's 503 "nothing was executed", rightly, but not what the next case is about; seen
  // 1 run in 5). Each case starts once no backend of the earlier ones is left, and on a pool
  // whose idle clients answer.
  beforeEach(async () => {
    for (let tries = 0; tries < 100; tries += 1) {
      const { rows } = await fixture.admin.query(
        `SELECT 1 FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND state = 'active' AND query ILIKE '%pg_sleep%'`,
      );
      if (rows.length === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
    const idle = await Promise.all(Array.from({ length: pool.idleCount }, () => pool.connect()));
    for (const client of idle) {
      try {
        await client.query('SELECT 1');
        client.release();
      } catch (error) {
        client.release(error as Error);
      }
    }
  });

  async function post(route: 'keyed' | 'plain', sku: string, strategy: Strategy) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/orders/${route}`)
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku, strategy })
      .timeout(30_000);
    const body = answer.body as { code?: string; sku?: string };
    return { status: answer.status, answer: body.code ?? body.sku };
  }

  async function kept(sku: string) {
    const count = async (table: string) =>
      (await fixture.admin.query(`SELECT 1 FROM ${table} WHERE sku = $1`, [sku])).rows.length;
    return { orders: await count('orders'), log: await count('order_log') };
  }

  it('control: without the library the cancel or kill ends the read alone (201, order kept)', async () => {
    for (const strategy of ['cancel query', 'kill session'] as const) {
      const sku = `plain-${strategy.replace(' ', '-')}`;
      expect(await post('plain', sku, strategy)).toEqual({ status: 201, answer: sku });
      expect(await kept(sku)).toEqual({ orders: 1, log: 1 });
    }
  }, 60_000);

  it("control: under the library, Kysely's default 'ignore query' places the order (201)", async () => {
    const first = await post('keyed', 'keyed-ignore', 'ignore query');
    const retried = await post('keyed', 'keyed-ignore', 'ignore query');
    expect({ first, retried, ...(await kept('keyed-ignore')) }).toEqual({
      first: { status: 201, answer: 'keyed-ignore' },
      retried: { status: 201, answer: 'keyed-ignore' },
      orders: 1,
      log: 1,
    });
  }, 60_000);

  it("under the library, 'kill session' answers a permanent 500 transaction_aborted, not a 503", async () => {
    const first = await post('keyed', 'keyed-kill', 'kill session');
    const retried = await post('keyed', 'keyed-kill', 'kill session');
    expect({ first, retried, ...(await kept('keyed-kill')) }).toEqual({
      first: { status: 500, answer: 'transaction_aborted' },
      retried: { status: 500, answer: 'transaction_aborted' },
      orders: 0,
      log: 0,
    });
  }, 60_000);

  it("under the library, 'cancel query' answers a permanent 500 transaction_aborted, not a 503", async () => {
    const first = await post('keyed', 'keyed-cancel', 'cancel query');
    const retried = await post('keyed', 'keyed-cancel', 'cancel query');
    expect({ first, retried, ...(await kept('keyed-cancel')) }).toEqual({
      first: { status: 500, answer: 'transaction_aborted' },
      retried: { status: 500, answer: 'transaction_aborted' },
      orders: 0,
      log: 0,
    });
  }, 60_000);
});
