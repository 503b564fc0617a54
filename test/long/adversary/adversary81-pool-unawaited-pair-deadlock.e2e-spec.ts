/**
 * Adversary 81 (pool): two fire-and-forget statements left unawaited by a handler (an audit
 * written on the side, as transactions.md allows: "Work a handler starts and does not await ...
 * joins the request's transaction while it is open") deadlock the request's commit against
 * itself: the request never answers, its connection is never given back, and its key is held
 * for as long as the process lives (the heartbeat renews it): every retry gets 409.
 *
 *   @Post() @Idempotent()
 *   async pair(@Query('n') n: string) {
 *     void pool.query('INSERT INTO audit (note) VALUES ($1)', [`${n}-a`]); // not awaited
 *     void pool.query('INSERT INTO audit (note) VALUES ($1)', [`${n}-b`]); // not awaited
 *     await someAsyncWorkOfAFewTicks(); // (here: one setImmediate)
 *     return { n };
 *   }
 *
 * Code path: lib/transaction/request-transaction.ts. The first statement carries the BEGIN
 * (`sendNow` -> `beginWith`, `this.beginning` set); the second, sent while that BEGIN is on its
 * way, is `this.beginning.then(after)` and is noted as running on the connection
 * (`send` -> `runningOnConnection`, since `ended` was false when it was sent). The handler
 * answers before the BEGIN's round trip is done: `commitWith` sets `state = 'ending'` and
 * `commitNow` awaits `this.beginning`, then `codeStatementsDone()`. When BEGIN completes, the
 * second statement's `after` runs first, sees `this.ended` and goes `apart()` -> `afterEnd()`,
 * which awaits `this.ending`: the commit, which is waiting in `codeStatementsDone()` for that
 * very statement. Neither ever settles. (`codeStatementsDone` has no bound by design: "never
 * counted against `databaseTimeoutMs`".)
 *
 * Docs: docs/guides/transactions.md "Database work belongs before the answer": "A statement
 * of its code still running on the request's connection when the handler answers (one not
 * awaited ...) runs to its end, and the stored answer and `COMMIT` are sent after it"; "A
 * statement of such work that arrives while the commit is under way waits for its outcome,
 * then runs on a connection of its own if the request committed". README's promise: nothing
 * hangs or holds a key for ever.
 *
 * Severity: critical (an ordinary fire-and-forget pattern hangs the request for ever, holds its
 * key for ever (409 to every retry while the process lives) and leaks a pool connection per
 * request: a few such requests exhaust the pool, and every other route answers 503).
 *
 * Fails now: of the handlers that answer 0..5 event-loop ticks after sending the two inserts,
 * k=1..4 never answer (the client's 4 s timeout fires), nothing of them is written, and a retry
 * of such a key answers 409 (k=0 and k=5 answer 201: the window is the BEGIN's round trip).
 * `app.close()` then hangs too (the suite's `afterAll` exceeded 60 s). With `max: 4`, the next
 * requests of any route answer 503 (the pool held by the hung ones). Control: the same two
 * inserts awaited (`await Promise.all([...])`) answer 201, write both rows, and replay.
 *
 * Suggested fix: a statement that `send` noted as running and that then goes `apart()` must
 * leave `codeStatements` before it waits for the end (note it only once it is handed to
 * node-postgres, e.g. in `after` when it calls `query.apply`, not at `send`); or let
 * `codeStatementsDone` wait only for statements actually handed to the connection.
 *
 * Fixed: a statement of its code is noted as running on the request's connection once it is
 * handed to node-postgres (`runningOnConnection` in `sendNow`'s hand-off and the carried first
 * statement), not when its code calls: one still waiting for the BEGIN that then runs apart
 * after the end is never waited for by the commit it waits for (lib/transaction/request-transaction.ts).
 */
import { Controller, HttpCode, Module, Post, Query } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;

async function ticks(k: number) {
  for (let i = 0; i < k; i += 1) await new Promise((resolve) => setImmediate(resolve));
}

@Controller('audit')
class AuditController {
  @Post('unawaited')
  @HttpCode(201)
  @Idempotent()
  async unawaited(@Query('n') n: string, @Query('k') k: string) {
    // Fire-and-forget audit rows: not awaited on purpose.
    void pool.query('INSERT INTO audit (note) VALUES ($1)', [`${n}-a`]).catch(() => undefined);
    void pool.query('INSERT INTO audit (note) VALUES ($1)', [`${n}-b`]).catch(() => undefined);
    await ticks(Number(k));
    return { n };
  }

  @Post('awaited')
  @HttpCode(201)
  @Idempotent()
  async awaited(@Query('n') n: string, @Query('k') k: string) {
    const both = Promise.all([
      pool.query('INSERT INTO audit (note) VALUES ($1)', [`${n}-a`]),
      pool.query('INSERT INTO audit (note) VALUES ($1)', [`${n}-b`]),
    ]);
    await ticks(Number(k));
    await both;
    return { n };
  }
}

describe('adversary 81 pool: two unawaited statements deadlock the commit', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1_500 }),
        }),
      ],
      controllers: [AuditController],
    })
    class AuditModule {}
    fixture = await startPoolApp('adv81_pool_unawaited_pair', {
      module: AuditModule,
      max: 12,
      usePool: (started) => {
        pool = started;
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE audit (id bigserial PRIMARY KEY, note text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(route: 'unawaited' | 'awaited', n: string, k: number) {
    try {
      const answer = await request(fixture.app.getHttpServer())
        .post(`/audit/${route}?n=${n}&k=${k}`)
        .set('Idempotency-Key', `key-${n}`)
        .timeout(4_000);
      return answer.status;
    } catch (error) {
      return (error as Error).message;
    }
  }

  async function notes(n: string) {
    await new Promise((resolve) => setTimeout(resolve, 200)); // rows written apart, if any
    const { rows } = await fixture.admin.query<{ note: string }>(
      `SELECT note FROM audit WHERE note LIKE $1 ORDER BY note`,
      [`${n}-%`],
    );
    return rows.map((row) => row.note);
  }

  it('control: the same two inserts awaited answer 201, write both rows and replay', async () => {
    const seen: Record<string, unknown> = {};
    for (let k = 0; k <= 5; k += 1) {
      const n = `awaited${k}`;
      const first = await post('awaited', n, k);
      const retried = await post('awaited', n, k);
      seen[n] = { first, retried, notes: await notes(n) };
    }
    const expected: Record<string, unknown> = {};
    for (let k = 0; k <= 5; k += 1) {
      const n = `awaited${k}`;
      expected[n] = { first: 201, retried: 201, notes: [`${n}-a`, `${n}-b`] };
    }
    expect(seen).toEqual(expected);
  }, 120_000);

  it('two unawaited inserts never hang the request nor hold its key', async () => {
    const seen: Record<string, unknown> = {};
    for (let k = 0; k <= 5; k += 1) {
      const n = `unawaited${k}`;
      const first = await post('unawaited', n, k);
      const retried = await post('unawaited', n, k);
      seen[n] = { first, retried, notes: await notes(n) };
    }
    const expected: Record<string, unknown> = {};
    for (let k = 0; k <= 5; k += 1) {
      const n = `unawaited${k}`;
      expected[n] = { first: 201, retried: 201, notes: [`${n}-a`, `${n}-b`] };
    }
    expect(seen).toEqual(expected);
  }, 120_000);
});
