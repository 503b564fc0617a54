/**
 * Changed again (session of 2026-12-07, adversary 106): the wait of 14f9f94 is replaced by a refusal. A COMMIT (or
 * END, COMMIT AND CHAIN, PREPARE TRANSACTION) on a view with a transaction of its code open,
 * sent from any scope but the view's own (another request or phase, no scope at all, another
 * request's outside(), a route that is not atomic), is refused before it is sent with
 * KeptClientCommittedElsewhereError (lib/data-layers/client-place.ts `refusesCommitFrom`,
 * `endsWithCommit`, tables in client-place.spec.ts; lib/data-layers/pool-transaction.ts
 * `JoinedClient.placed`); an idempotent sender answers 500 runner_connected_outside_request,
 * a plain route's code gets the error (its 500). The waiting (`answerAwaits`,
 * `afterTakersCommitted`, `RequestTransaction.outcome()`) is gone. The control changed with
 * the rule (not a weakening): B's COMMIT is refused even when A would commit, B is told it
 * failed, and the app's `finally { release() }` rolls the batch's transaction (a savepoint in
 * A) back: A's own write sent beside that open nested transaction on its one connection rolls
 * back with it, so A is refused (StatementBesideNestedTransactionError: 500
 * transaction_aborted, nothing stored, its retry runs again). No answer claims an effect that
 * is lost, and nothing of a refused request is kept.
 *
 * Fixed (session of 2026-12-07): B's answer is made to depend on A's outcome. A `COMMIT` sent
 * from an open request on a view of another scope's with a transaction of its code open
 * (lib/data-layers/client-place.ts `answerAwaitsTaker`, table in client-place.spec.ts) is
 * noted by lib/data-layers/pool-transaction.ts `JoinedClient.placed` on the sender
 * (`PoolTransaction.answerAwaits`); the sender's commit waits (at most `timeoutMs`) for the
 * taker's outcome (`RequestTransaction.outcome()`) and, unless it committed, is refused with
 * `KeptClientCommittedElsewhereError` (500 `runner_connected_outside_request`, rolled back,
 * nothing stored, key given back). Why not refuse B's `COMMIT` at once: the control (A
 * commits) would then lose B's 201, which the same code without the library answers. Why only
 * a `COMMIT`: Prisma's engine may send an interactive transaction's other statements from
 * another request's context (its request batcher dispatches every transaction's queries in the
 * tick of the first caller: @prisma/client runtime `dispatchBatches`), but its `COMMIT` only
 * from the `$transaction` caller's (`_engine.transaction('commit')`, through the transaction
 * manager's own queue, not the batcher); so no Prisma request waits on another. Documented in
 * data-layers.md and problems.md.
 *
 * Adversary 104 (pool): a kept client with a transaction of the app's open on it (a batch
 * writer: `BEGIN` at the first row, `COMMIT` at the second) stays in the transaction of the
 * request that took it. Request B's row, written and committed by B's own `COMMIT`, rolls back
 * with request A, though B answered 201 and replays 201.
 *
 * User code:
 *   // a module-level audit batch, committed every two rows
 *   async function audit(sku) {
 *     if (!batch) { batch = { client: await pool.connect(), rows: 0 }; await batch.client.query('BEGIN'); }
 *     const b = batch;
 *     await b.client.query('INSERT INTO audit (sku) VALUES ($1)', [sku]);
 *     if (++b.rows === 2) { batch = undefined; await b.client.query('COMMIT'); b.client.release(); }
 *   }
 *   @Post() @Idempotent() async place({ sku, slow }) {
 *     await audit(sku); await pool.query('INSERT INTO orders …');
 *     ... // A only: slower work, then a passing failure (its own statement timeout) -> 503
 *   }
 *   A = POST sku A (slow, fails), B = POST sku B 100 ms later (fast)
 *
 * Code path: lib/data-layers/pool-transaction.ts `JoinedClient.placed` (held
 * `view-in-transaction` -> lib/data-layers/client-place.ts `placeOfClient` 'own'): B's INSERT
 * and B's COMMIT run on A's connection, as a savepoint of A's transaction (the view's `BEGIN`
 * is a savepoint there); B's COMMIT only releases that savepoint; A's rollback takes them.
 *
 * Docs quote: data-layers.md: "One whose code began a transaction on it (`BEGIN`) stays in that
 * transaction until its code ends it, as on TypeORM" — here its code (B) ended it with COMMIT,
 * and it was still rolled back with A; the promise: a request's effects commit with its stored
 * answer, or not at all. Without the library the batch's COMMIT commits both rows (the client
 * is a connection of its own); B's row is never lost.
 *
 * Severity: high (B's stored 201 is replayed for a write that was rolled back: a lost effect;
 * differs from the same code without the library, where B's COMMIT makes it durable).
 *
 * Fails now: A answers 503, B answers 201 and replays 201; the audit table holds neither A's
 * nor B's row. Control: the same two requests, A not failing, keep both rows.
 *
 * Suggested fix: a view with a nested transaction of its code open, used from another open
 * request, is refused (`ClientTakenElsewhereError`), or its `COMMIT` sent from another
 * request refused rather than releasing a savepoint of a request that can still roll back;
 * at least say in data-layers.md that such a transaction commits or rolls back with the
 * request that took the client, whatever request commits it.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool, type PoolClient } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
let batch: { client: PoolClient; rows: number } | undefined;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The app's audit batch: one transaction per two rows, on a client of its own. */
async function audit(sku: string) {
  if (!batch) {
    batch = { client: await pool.connect(), rows: 0 };
    await batch.client.query('BEGIN');
  }
  const current = batch;
  await current.client.query(`INSERT INTO audit (sku) VALUES ($1)`, [sku]);
  current.rows += 1;
  if (current.rows === 2) {
    batch = undefined;
    try {
      await current.client.query('COMMIT');
    } finally {
      current.client.release();
    }
  }
}

/** A's tail: slower work, then a passing failure (its own statement timeout): 503. */
async function slowThenFail(slow: boolean) {
  if (!slow) return;
  await sleep(400);
  await pool.query(`SET LOCAL statement_timeout = '50ms'`);
  await pool.query('SELECT pg_sleep(0.3)');
}

@Controller('orders')
class OrdersController {
  @Post()
  @HttpCode(201)
  @Idempotent()
  async place(@Body() { sku, slow, fail }: { sku: string; slow: boolean; fail: boolean }) {
    await audit(sku);
    await pool.query(`INSERT INTO orders (sku) VALUES ($1)`, [sku]);
    if (slow) await sleep(400);
    await slowThenFail(fail);
    return { sku };
  }
}

describe("adversary 104 pool: a kept batch's transaction rolls back with the request that took it", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv104_pool_batch_other_request', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
        await owner.query(`CREATE TABLE audit (id bigserial PRIMARY KEY, sku text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(sku: string, slow: boolean, fail: boolean) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/orders`)
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku, slow, fail })
      .timeout(20_000);
    const body = answer.body as { code?: string; sku?: string };
    return { status: answer.status, answer: body.code ?? body.sku };
  }

  async function skus(table: string, prefix: string) {
    const { rows } = await fixture.admin.query<{ sku: string }>(
      `SELECT sku FROM ${table} WHERE sku LIKE $1 ORDER BY sku`,
      [`${prefix}%`],
    );
    return rows.map((row) => row.sku);
  }

  /** A (slow, maybe failing) and, 100 ms into it, B (fast); then B's retry. */
  async function race(prefix: string, aFails: boolean) {
    const first = post(`${prefix}-A`, true, aFails);
    await sleep(100);
    const other = await post(`${prefix}-B`, false, false);
    const a = await first;
    await sleep(300);
    const bRetried = await post(`${prefix}-B`, false, false);
    return {
      a,
      b: other,
      bRetried,
      orders: await skus('orders', prefix),
      audit: await skus('audit', prefix),
    };
  }

  it('control: B refused clearly even when A commits, nothing answered done and lost', async () => {
    // B's COMMIT refused before it is sent; the app's release rolls the batch (a savepoint in
    // A) back with A's write sent beside it, so A is refused too; B's retry leaves a new batch
    // open at its end (adversary104-pool-batch-left-open): refused. Nothing stored, nothing kept.
    expect(await race('ok', false)).toEqual({
      a: { status: 500, answer: 'transaction_aborted' },
      b: { status: 500, answer: 'runner_connected_outside_request' },
      bRetried: { status: 500, answer: 'transaction_aborted' },
      orders: [],
      audit: [],
    });
  }, 60_000);

  it("B's audit row, committed by B, is kept with B's stored 201", async () => {
    const outcome = await race('fail', true);
    // Refused at once for B (500, nothing of B kept) would hold the promise too.
    if (outcome.b.status === 500 && !outcome.orders.includes('fail-B')) return;
    expect({ b: outcome.b, bRetried: outcome.bRetried, orders: outcome.orders }).toEqual({
      b: { status: 201, answer: 'fail-B' },
      bRetried: { status: 201, answer: 'fail-B' },
      orders: ['fail-B'],
    });
    expect(outcome.audit).toContain('fail-B');
  }, 60_000);
});
