/**
 * Fixed (session of 2026-12-07): the wait of 14f9f94 is replaced by a refusal. A COMMIT (or
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
 * Adversary 106 (pool): the round-104 fix (14f9f94) makes request B, which sent `COMMIT` on a
 * client request A took and kept with a transaction open, wait for A's outcome at most
 * `databaseTimeoutMs`, and refuses B when A has none by then (`afterTakersCommitted`: the
 * deadline counts as not committed). But B's writes through that client are not B's to roll
 * back: they are in A's transaction. When A is only slow (work outside the database longer
 * than the deadline: an HTTP call, a lease renewed by its heartbeat) and then commits, B has
 * answered 500 `runner_connected_outside_request` ("The request rolls back", nothing stored,
 * its key given back) while its audit row commits with A. The client retries B, as a 500 of
 * the library's invites, and B's write is made again: a refused request's effect kept.
 *
 * User code (the batch writer of adversary 104):
 *   async function audit(sku) {
 *     if (!batch) { batch = { client: await pool.connect(), rows: 0 }; await batch.client.query('BEGIN'); }
 *     const b = batch; await b.client.query('INSERT INTO audit (sku) VALUES ($1)', [sku]);
 *     if (++b.rows === 2) { batch = undefined; await b.client.query('COMMIT'); b.client.release(); }
 *   }
 *   IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1000 }) })
 *   @Post() @Idempotent() place({ sku, first }) { await audit(sku); await pool.query('INSERT INTO orders …');
 *     if (first) await externalCall(); return { sku }; }      // A's external call: 2.5 s
 *   A = POST first (takes the batch: BEGIN, its row; then its call), B = POST (the second row
 *   and the batch's COMMIT).
 *
 * Code path: lib/data-layers/pool-transaction.ts `JoinedClient.placed` → `answerAwaits(A)`;
 * `PoolTransaction.afterTakersCommitted`: `withDeadline(outcomes, this.timeoutMs, …)` rejects
 * → `committed = false` → `KeptClientCommittedElsewhereError`; B rolls back its own
 * transaction, but its INSERT and COMMIT ran on A's connection (a savepoint there, released),
 * and A's commit keeps them.
 *
 * Docs quote: data-layers.md: "a `COMMIT` another request sends on it makes that request's
 * answer wait (at most `timeoutMs`) for the outcome of the one that took it, stored only if
 * that one committed, else refused (`KeptClientCommittedElsewhereError`, 500
 * `runner_connected_outside_request`, nothing stored)"; the error's message: "The request
 * rolls back". The promise: a request's effects commit with its stored answer, or not at all.
 *
 * Severity: high (B answered 500 and gave its key back, yet its write committed: the retry
 * writes it again, twice executed in effect).
 *
 * Fails now: un-skipped: A 201, B 500 runner_connected_outside_request, orders ['slow-A'], audit
 * ['slow-A', 'slow-B'] (B's row kept though B was refused).
 *
 * Controls: A ending within the wait (300 ms): B waits, both answer 201, both rows kept once.
 *
 * Suggested fix: B cannot undo what it sent in A's transaction, so B must not be refused while
 * A may still commit: wait for A's outcome as long as A's lease holds (not B's statement
 * deadline), or, past the wait, answer B 503 without giving its key back until A's outcome is
 * known; or refuse B's `COMMIT` itself (before it is sent) so that nothing of B's is in A.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool, type PoolClient } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
let batch: { client: PoolClient; rows: number } | undefined;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Resolved once A's audit row is written (A holds the batch's client, its BEGIN sent). */
let aAudited: { promise: Promise<void>; resolve: () => void } | undefined;
function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}
/** How long A's work outside the database takes (an HTTP call): past `databaseTimeoutMs`. */
let aWorkMs = 0;

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

@Controller('orders')
class OrdersController {
  @Post()
  @HttpCode(201)
  @Idempotent()
  async place(@Body() { sku, first }: { sku: string; first: boolean }) {
    await audit(sku);
    await pool.query(`INSERT INTO orders (sku) VALUES ($1)`, [sku]);
    if (first) {
      aAudited?.resolve();
      await sleep(aWorkMs);
    }
    return { sku };
  }
}

describe('adversary 106 pool: a refused COMMIT on a kept client whose taker commits later', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1000 }),
        }),
      ],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv106_pool_batch_taker_outlasts', {
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

  async function post(sku: string, first: boolean) {
    const answer = await request(fixture.app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku, first })
      .timeout(20_000);
    const body = answer.body as { code?: string; sku?: string };
    return `${answer.status} ${body.code ?? body.sku}`;
  }

  async function rows(table: string, prefix: string) {
    const { rows: found } = await fixture.admin.query<{ sku: string }>(
      `SELECT sku FROM ${table} WHERE sku LIKE $1 ORDER BY sku`,
      [`${prefix}%`],
    );
    return found.map((row) => row.sku);
  }

  /** A takes the batch, works `workMs`; B writes the second row and COMMITs. */
  async function race(prefix: string, workMs: number) {
    expect(batch).toBeUndefined();
    aWorkMs = workMs;
    aAudited = deferred();
    const first = post(`${prefix}-A`, true);
    await aAudited.promise;
    const b = await post(`${prefix}-B`, false);
    const a = await first;
    return {
      a,
      b,
      orders: await rows('orders', prefix),
      audit: await rows('audit', prefix),
    };
  }

  it('control: A ending quickly, B is refused all the same and nothing answered done is lost', async () => {
    expect(await race('quick', 300)).toEqual({
      a: '500 transaction_aborted',
      b: '500 runner_connected_outside_request',
      orders: [],
      audit: [],
    });
  }, 60_000);

  it('a B refused for a taker that outlasted its wait keeps none of its writes (fixed: refused)', async () => {
    const outcome = await race('slow', 2500);
    // Either B waited for A (201, both rows), or B was refused and none of B's writes stayed.
    // B refused before its COMMIT was sent; none of B's writes stayed. A's own write went
    // with the batch the app rolled back (see the header): A refused, nothing stored.
    expect(outcome).toEqual({
      a: '500 transaction_aborted',
      b: '500 runner_connected_outside_request',
      orders: [],
      audit: [],
    });
  }, 60_000);
});
