/**
 * Adversary 83 (pool): a node-postgres `Query` handed to a client of the request and left to
 * run, on a pool configured with node-postgres' `query_timeout` (the Pool's config, which every
 * client's statements take). node-postgres gives up on the Query at the read timeout: it calls
 * `query.handleError(new Error('Query read timeout'))` (pg/lib/client.js, on the next tick of
 * its timer) while the statement goes on running on the server as the client's active query.
 * The round-82 fix tracks a `pg.Query` "until node-postgres tells it ended" (`endOf`), and
 * `endOf` counts that `handleError` as its end: the statement leaves `codeStatements` at the
 * read timeout, the stored answer and `COMMIT` are queued behind the statement still running,
 * and their `databaseTimeoutMs` deadline runs out: 503 `store_unavailable`, rolled back, on
 * every try. The same statement sent as a promise (`pool.query(text)`, its read timeout
 * caught) is waited for (`stillRunningAfter` -> `readyForNext`): 201 (the control).
 *
 *   const pool = new pg.Pool({ connectionString, query_timeout: 500 });
 *   @Post() @Idempotent()
 *   async create(@Query('n') n: string) {
 *     await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
 *     const client = await pool.connect();
 *     const q = client.query(new pg.Query('SELECT slow_enrichment()'));  // left to run
 *     q.on('error', () => {});
 *     client.release();
 *     return { n };
 *   }
 *
 * Code path: lib/transaction/request-transaction.ts:1316 `handOver` -> `noteRunning(endOf(q))`;
 * lib/transaction/submitted-end.ts:16 `endOf` resolves on `handleError` as on
 * `handleReadyForQuery`; pg/lib/client.js `query()`: the read-timeout timer calls
 * `query.handleError(error)` and leaves the Query active. `codeStatementsDone()` then returns
 * while the statement runs; the commit's deadline (`databaseTimeoutMs`) fires behind it.
 * (The same with the Query's own `query_timeout` assigned on it: client.js reads
 * `config.query_timeout` off the Query itself.)
 *
 * Docs: docs/guides/transactions.md: "a node-postgres `Query` handed to a client and left to
 * run) runs to its end, and the stored answer and `COMMIT` are sent after it ... That wait is
 * the handler's, bounded as its statements are (`statement_timeout`), not by
 * `databaseTimeoutMs`"; data-layers.md: "`query_timeout` ... stops only the wait: the
 * statement runs on to its end on the server, and on the request's connection the stored
 * answer and `COMMIT` wait for it".
 *
 * Severity: high (every try 503 for a statement of the handler's, no outage; the same
 * adversary-82 failure through the other path its fix named).
 *
 * Failed before the fix: first '503 store_unavailable', no row; the retry runs the handler
 * again and answers 503 again (runs 2, written 0).
 *
 * Fixed: `endOf(submittable, client)` takes a `handleError` with node-postgres' read timeout
 * (`stillRunningAfter`, now lib/connection/read-timeout.ts) as no end: the Query counts among
 * the code's statements until the client's next ReadyForQuery (`readyForNext`), its own
 * ReadyForQuery or a later server error; `handOver` passes the request's client (7208184).
 *
 * Suggested fix: in `endOf` (or `handOver`), a `handleError` whose error is node-postgres'
 * read timeout (`stillRunningAfter`) is not the Query's end: keep it running until the
 * client's next ReadyForQuery (`readyForNext(client)`), or until `handleReadyForQuery` /
 * a later `handleError` from the server.
 */
import { Controller, HttpCode, Module, Post, Query } from '@nestjs/common';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

let pool: Pool;
const runs = new Map<string, number>();

@Controller('audit')
class AuditController {
  @Post('query')
  @HttpCode(201)
  @Idempotent()
  async query(@Query('n') n: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    const client = await pool.connect();
    const running = client.query(
      new pg.Query('SELECT pg_sleep(2)') as never,
    ) as unknown as pg.Query;
    running.on('error', () => undefined);
    client.release();
    return { n };
  }

  @Post('promise')
  @HttpCode(201)
  @Idempotent()
  async promise(@Query('n') n: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    try {
      await pool.query('SELECT pg_sleep(2)');
    } catch {
      // Query read timeout: answer without it
    }
    return { n };
  }
}

describe('adversary 83 pool: a pg.Query given up on through the Pool query_timeout makes every try 503', () => {
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
    fixture = await startPoolApp('adv83_pool_query_timeout_query', {
      module: AuditModule,
      max: 6,
      usePool: (started) => {
        pool = createTestPool({ ...started.options, max: 6, query_timeout: 500 });
        pool.on('error', () => undefined);
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE audit (id bigserial PRIMARY KEY, note text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
    await endTestPool(pool);
  }, 60_000);

  async function post(route: string, n: string) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/audit/${route}?n=${n}`)
      .set('Idempotency-Key', `key-${n}`)
      .timeout(15_000);
    const body = answer.body as { code?: string; n?: string };
    return `${answer.status} ${body.code ?? body.n ?? ''}`;
  }

  async function scenario(route: 'query' | 'promise') {
    const n = `${route}1`;
    const first = await post(route, n);
    await new Promise((resolve) => setTimeout(resolve, 2_000)); // the server's statement done
    const retried = await post(route, n);
    const { rows } = await fixture.admin.query(`SELECT 1 FROM audit WHERE note = $1`, [n]);
    return { first, retried, runs: runs.get(n), written: rows.length };
  }

  it('control: the same statement as a promise, its read timeout caught: 201 after it, one row, replayed', async () => {
    expect(await scenario('promise')).toEqual({
      first: '201 promise1',
      retried: '201 promise1',
      runs: 1,
      written: 1,
    });
  }, 60_000);

  it('a pg.Query given up on through the pool query_timeout is waited for, never a 503', async () => {
    expect(await scenario('query')).toEqual({
      first: '201 query1',
      retried: '201 query1',
      runs: 1,
      written: 1,
    });
  }, 60_000);
});
