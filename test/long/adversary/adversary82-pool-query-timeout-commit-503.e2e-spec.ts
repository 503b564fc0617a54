/**
 * Adversary 82 (pool): a statement the handler bounded with node-postgres' per-query
 * `query_timeout` and gave up on (caught the read timeout, answered without it) still runs on
 * the request's connection: node-postgres rejects at the timeout, but the statement goes on
 * on the server and stays the client's active query. The library counts it done at the
 * rejection (the fix of round 81 waits only for statements whose promise is pending), sends
 * the stored answer and COMMIT behind it, and their `databaseTimeoutMs` deadline runs out
 * while the server still runs the handler's statement: 503 `store_unavailable`, rolled back;
 * the retry does the same: 503 on every try, for a statement of the handler's, with no outage.
 *
 *   @Post() @Idempotent()
 *   async create(@Query('n') n: string) {
 *     await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
 *     try {                                         // best-effort enrichment, bounded
 *       await pool.query({ text: 'SELECT slow_enrichment()', query_timeout: 200 });
 *     } catch { /* Query read timeout: answer without it *\/ }
 *     return { n };
 *   }
 *
 * Code path: lib/transaction/request-transaction.ts `sendNow` -> `runningOnConnection(query.apply
 * (...))`: the statement is taken off `codeStatements` when node-postgres' promise settles,
 * which with `query_timeout` is its client-side read timeout (pg/lib/client.js: the callback
 * rejected, the Query left as `activeQuery`); `commitNow` -> `codeStatementsDone()` returns at
 * once, `fencedCommit(client, …, this.timeoutMs)` queues behind the statement still running on
 * the server, its deadline fires: 503 `store_unavailable`, rolled back.
 *
 * Docs: docs/guides/data-layers.md: "node-postgres' per-query `query_timeout` (`pool.query({
 * text, query_timeout })`) bounds the statement as without the library"; docs/guides/
 * transactions.md: a statement of the handler's still running "runs to its end, and the
 * stored answer and `COMMIT` are sent after it ... That wait is the handler's, bounded as its
 * statements are (`statement_timeout`), not by `databaseTimeoutMs`".
 *
 * Severity: high (a handler that bounds an optional read the way node-postgres documents it
 * never completes: 503 on every retry while the read is slower than `databaseTimeoutMs`, its
 * work never committed; without the library it answers 201).
 *
 * Fails now: first 503 `store_unavailable` after ~1.2 s, no row; the retry (3 s later, the
 * server's statement done long since) runs the handler again and answers 503 again.
 * Control: the same statement left running unawaited (`void pool.query(...)`): 201 after it
 * ends (~3 s), one row, the retry replays.
 *
 * The same with a node-postgres `Query` handed to a client of the request and left to run
 * (`const c = await pool.connect(); c.query(new pg.Query(text)); c.release(); return …`):
 * `sendNow`'s submittable branch never notes it in `codeStatements` at all, so the commit's
 * deadline runs behind it: 503 `store_unavailable` on every try (second skipped case). Docs:
 * data-layers.md "A node-postgres `Query` handed to it ... runs to its end by itself: what is
 * queued behind it on that client runs after it".
 *
 * Suggested fix: note a statement as done when its client is ready for the next query (the
 * Query's `handleReadyForQuery`, or the client's `activeQuery` cleared), not when its promise
 * settles (a submittable too, from its hand-off to node-postgres); or, for a statement that rejected with node-postgres' read timeout, keep waiting
 * for the client's next ReadyForQuery before the library's own statements' deadline starts.
 *
 * Fixed: a statement rejected with node-postgres' read timeout counts as running on until its
 * client's next ReadyForQuery (`stillRunningAfter`, `readyForNext`); a submittable that runs
 * to its end by itself (a `pg.Query`, not a cursor or stream: `runsToItsEnd`) counts from its
 * hand-off until node-postgres tells it ended (`endOf`): lib/transaction/still-running.ts,
 * request-transaction.ts `runningOnConnection` / `handOver`. The answer's statements wait for
 * them before their deadline starts, and the heartbeat runs meanwhile.
 */
import { Controller, HttpCode, Module, Post, Query } from '@nestjs/common';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
const runs = new Map<string, number>();

@Controller('audit')
class AuditController {
  @Post('bounded')
  @HttpCode(201)
  @Idempotent()
  async bounded(@Query('n') n: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    try {
      await pool.query({ text: 'SELECT pg_sleep(3)', query_timeout: 200 } as never);
    } catch {
      // Query read timeout: answer without the enrichment
    }
    return { n };
  }

  @Post('query')
  @HttpCode(201)
  @Idempotent()
  async query(@Query('n') n: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    const client = await pool.connect();
    const running = client.query(
      new pg.Query('SELECT pg_sleep(3)') as never,
    ) as unknown as pg.Query;
    running.on('error', () => undefined);
    client.release();
    return { n };
  }

  @Post('unawaited')
  @HttpCode(201)
  @Idempotent()
  async unawaited(@Query('n') n: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    void pool.query('SELECT pg_sleep(3)').catch(() => undefined);
    return { n };
  }
}

describe('adversary 82 pool: a statement given up on through query_timeout makes every try 503', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1_000 }),
        }),
      ],
      controllers: [AuditController],
    })
    class AuditModule {}
    fixture = await startPoolApp('adv82_pool_query_timeout', {
      module: AuditModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query(`CREATE TABLE audit (id bigserial PRIMARY KEY, note text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  }, 60_000);

  async function post(route: string, n: string) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/audit/${route}?n=${n}`)
      .set('Idempotency-Key', `key-${n}`)
      .timeout(15_000);
    return `${answer.status} ${(answer.body as { code?: string; n?: string }).code ?? (answer.body as { n?: string }).n ?? ''}`;
  }

  async function scenario(route: 'bounded' | 'query' | 'unawaited') {
    const n = `${route}1`;
    const first = await post(route, n);
    await new Promise((resolve) => setTimeout(resolve, 3_000)); // the server's statement done
    const retried = await post(route, n);
    const { rows } = await fixture.admin.query(`SELECT 1 FROM audit WHERE note = $1`, [n]);
    return { first, retried, runs: runs.get(n), written: rows.length };
  }

  it('control: the same statement left running unawaited: 201 after it, one row, replayed', async () => {
    expect(await scenario('unawaited')).toEqual({
      first: '201 unawaited1',
      retried: '201 unawaited1',
      runs: 1,
      written: 1,
    });
  }, 60_000);

  it('a statement given up on through query_timeout is waited for, never a 503', async () => {
    expect(await scenario('bounded')).toEqual({
      first: '201 bounded1',
      retried: '201 bounded1',
      runs: 1,
      written: 1,
    });
  }, 60_000);

  it('a node-postgres Query left running is waited for, never a 503', async () => {
    expect(await scenario('query')).toEqual({
      first: '201 query1',
      retried: '201 query1',
      runs: 1,
      written: 1,
    });
  }, 60_000);
});
