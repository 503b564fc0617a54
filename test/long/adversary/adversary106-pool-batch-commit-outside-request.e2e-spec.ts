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
 * Adversary 106 (pool): the round-104 fix (14f9f94) makes a `COMMIT` sent on a kept client
 * with the app's transaction open wait for the outcome of the request that took the client,
 * but only when the sender is an open atomic request (lib/data-layers/client-place.ts
 * `answerAwaitsTaker`: `scope === 'open'`; pool-transaction.ts `placed` returns at once when
 * there is no scope). Sent from a route without `@Idempotent()`, or from an
 * `@Idempotent({ atomic: false })` route, the same `COMMIT` still only releases a savepoint of
 * request A's transaction: A then fails (503), and B's write, which B's `COMMIT` returned
 * success for, is rolled back with A. The plain route answered 201 for a row that is not there;
 * the non-atomic route stored 201 and replays it for a row that is not there. The same from an
 * atomic request whose audit runs in `IdempotentTransaction.outside()`: neither refused (as
 * data-layers.md says a kept client used in another request's `outside()` is) nor durable.
 *
 * User code (the batch writer of adversary 104, shared by every route of the app):
 *   async function audit(sku) {
 *     if (!batch) { batch = { client: await pool.connect(), rows: 0 }; await batch.client.query('BEGIN'); }
 *     const b = batch; await b.client.query('INSERT INTO audit (sku) VALUES ($1)', [sku]);
 *     if (++b.rows === 2) { batch = undefined; await b.client.query('COMMIT'); b.client.release(); }
 *   }
 *   @Post('orders') @Idempotent() place({ sku, fail }) { await audit(sku); …; if (fail) → 503 }
 *   @Post('notes') note({ sku }) { await audit(sku); return { sku }; }                 // plain
 *   @Post('loose') @Idempotent({ atomic: false }) loose({ sku }) { await audit(sku); … }
 *   @Post('apart') @Idempotent() apart({ sku }) { await IdempotentTransaction.outside(() => audit(sku)); … }
 *   A = POST /orders (takes the batch's client: BEGIN, its row), then B = POST /notes or /loose
 *   (the second row and the COMMIT), then A fails.
 *
 * Code path: lib/data-layers/pool-transaction.ts `JoinedClient.placed`: no scope (plain route)
 * → undefined, the statement runs as the view's own, inside A's transaction; the non-atomic
 * route's scope joins nothing → lib/data-layers/client-place.ts `placeOfClient`
 * ('view-in-transaction' → 'own') and `answerAwaitsTaker` false (not 'open'), and the
 * sender is no PoolTransaction. B's COMMIT releases A's savepoint; A's ROLLBACK takes B's row.
 *
 * Docs quote: transactions.md: "`@Idempotent({ atomic: false })` ... Its writes then commit on
 * their own"; data-layers.md / drizzle.md: "Outside a request (a route without
 * `@Idempotent()`, a script, a consumer) the pool behaves as always"; data-layers.md: "The
 * request a statement belongs to is the one in whose async context it is sent, whichever
 * client sends it", and for this pattern: "a `COMMIT` another request sends on it makes that
 * request's answer wait ... stored only if that one committed, else refused"; "Refused
 * (`ClientTakenElsewhereError` ...): ... one used in a scope that joins nothing (another
 * request's `outside()`, a route that is not atomic)".
 *
 * Severity: high (a write its COMMIT made durable is lost: the plain route's 201 and the
 * non-atomic route's stored, replayed 201 stand for a row that was rolled back with another
 * request; without the library B's COMMIT commits it).
 *
 * Fails now: un-skipped, plain: A 503, B 201, audit table [] (not ['plain-B']); non-atomic:
 * A 503, B 201, its retry replays 201, audit [] (not ['loose-B']); outside(): A 503, B 201,
 * its retry replays 201, audit [] (not ['apart-B'], nor B refused).
 *
 * Controls: A not failing: A 201, the plain B 201, both audit rows kept.
 *
 * Suggested fix: a `COMMIT` on a view with its code's transaction open sent from no scope, a
 * scope that joins nothing or `outside()` cannot wait for the taker: refuse it there (an error
 * to its caller, as `KeptClientCommittedElsewhereError`), or refuse such a view to every scope
 * but the one that took it.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool, type PoolClient } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, IdempotentTransaction } from '../../../lib/index.js';
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

@Controller()
class OrdersController {
  /** A: idempotent, slow, then (when asked) a passing failure: 503. */
  @Post('orders')
  @HttpCode(201)
  @Idempotent()
  async place(@Body() { sku, fail }: { sku: string; fail: boolean }) {
    await audit(sku);
    aAudited?.resolve();
    await pool.query(`INSERT INTO orders (sku) VALUES ($1)`, [sku]);
    await sleep(400);
    if (fail) {
      await pool.query(`SET LOCAL statement_timeout = '50ms'`);
      await pool.query('SELECT pg_sleep(0.3)');
    }
    return { sku };
  }

  @Post('warm')
  @HttpCode(201)
  @Idempotent()
  async warm() {
    await pool.query('SELECT 1');
    return { sku: 'warm' };
  }

  /** B: a route without @Idempotent(): "the pool behaves as always". */
  @Post('notes')
  @HttpCode(201)
  async note(@Body() { sku }: { sku: string }) {
    await audit(sku);
    return { sku };
  }

  /** B'': an idempotent route whose audit is work that is not the request's (`outside()`). */
  @Post('apart')
  @HttpCode(201)
  @Idempotent()
  async apart(@Body() { sku }: { sku: string }) {
    await IdempotentTransaction.outside(() => audit(sku));
    return { sku };
  }

  /** B': an idempotent route that opted out: "its writes commit on their own". */
  @Post('loose')
  @HttpCode(201)
  @Idempotent({ atomic: false })
  async loose(@Body() { sku }: { sku: string }) {
    await audit(sku);
    return { sku };
  }
}

describe('adversary 106 pool: a batch COMMIT sent from outside any atomic request on a kept client', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv106_pool_batch_commit_outside', {
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
    // The app's first idempotent request reads the schema: not inside the race.
    await post('warm', 'warm');
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(path: string, sku: string, fail = false) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/${path}`)
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku, fail })
      .timeout(20_000);
    const body = answer.body as { code?: string; sku?: string };
    return `${answer.status} ${body.code ?? body.sku}`;
  }

  async function audited(prefix: string) {
    const { rows } = await fixture.admin.query<{ sku: string }>(
      `SELECT sku FROM audit WHERE sku LIKE $1 ORDER BY sku`,
      [`${prefix}%`],
    );
    return rows.map((row) => row.sku);
  }

  /** A (idempotent, slow, maybe failing) and, 100 ms into it, B on `path`. */
  async function race(prefix: string, path: string, aFails: boolean) {
    expect(batch).toBeUndefined();
    aAudited = deferred();
    const first = post('orders', `${prefix}-A`, aFails);
    await aAudited.promise;
    const b = await post(path, `${prefix}-B`);
    const a = await first;
    return { a, b, audit: await audited(prefix) };
  }

  it("control: A not failing, the plain route's COMMIT is refused and nothing answered done is lost", async () => {
    // B's COMMIT refused (its 500); the app's release rolls the batch back, with A's write
    // sent beside it: A refused too, nothing stored (see the header).
    expect(await race('ok', 'notes', false)).toEqual({
      a: '500 transaction_aborted',
      b: '500 undefined',
      audit: [],
    });
  }, 60_000);

  it("a plain route's COMMIT on the batch keeps its audit row whatever A does (fixed: refused)", async () => {
    const outcome = await race('plain', 'notes', true);
    // Refusing B's statement (an error for B, nothing of B written) would hold too.
    if (outcome.b.startsWith('500')) return;
    expect(outcome).toEqual({ a: '503 database_transient', b: '201 plain-B', audit: ['plain-B'] });
  }, 60_000);

  it("a non-atomic route's COMMIT on the batch keeps its audit row whatever A does (fixed: refused)", async () => {
    const outcome = await race('loose', 'loose', true);
    if (outcome.b.startsWith('500')) return;
    // Its retry replays the stored answer.
    const retried = await post('loose', 'loose-B');
    expect({ ...outcome, retried }).toEqual({
      a: '503 database_transient',
      b: '201 loose-B',
      retried: '201 loose-B',
      audit: ['loose-B'],
    });
  }, 60_000);

  it("a COMMIT in another request's outside() on the batch keeps its row or is refused (fixed: refused)", async () => {
    const outcome = await race('apart', 'apart', true);
    // Refused (data-layers.md: a kept client used in another request's outside()) holds too.
    if (outcome.b.startsWith('500')) return;
    const retried = await post('apart', 'apart-B');
    expect({ ...outcome, retried }).toEqual({
      a: '503 database_transient',
      b: '201 apart-B',
      retried: '201 apart-B',
      audit: ['apart-B'],
    });
  }, 60_000);
});
