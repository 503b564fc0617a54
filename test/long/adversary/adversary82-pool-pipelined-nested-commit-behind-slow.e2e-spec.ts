/**
 * Adversary 82 (pool): a nested transaction sent pipelined and not awaited (`BEGIN`, a
 * statement, `COMMIT`, `release()`, then `return`: the shape data-layers.md documents) whose
 * statement takes longer than `databaseTimeoutMs` is judged left open: the request answers 500
 * `transaction_aborted`, rolled back, and every retry does the same. The statement itself is
 * waited for without a bound (the round-81 fix: "that wait is the handler's"), but the
 * `COMMIT` queued behind it is waited for at most `databaseTimeoutMs`, counted from the
 * handler's answer, not from that statement's end.
 *
 *   @Post() @Idempotent()
 *   async create(@Query('n') n: string) {
 *     await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
 *     const client = await pool.connect();           // an audit trail on the side, in order
 *     void client.query('BEGIN');
 *     void client.query('INSERT INTO audit (note) SELECT … FROM slow_enrichment()', [n]);
 *     void client.query('COMMIT');
 *     client.release();
 *     return { n };
 *   }
 *
 * Code path: lib/data-layers/pool-transaction.ts:268 `afterEndsInFlight` ->
 * lib/data-layers/ends-in-flight.ts:44 `settledWithin(ends, this.timeoutMs)`: the bound
 * starts when the request's commit is called; the nested `COMMIT` is behind the slow INSERT on
 * node-postgres' queue, so the bound runs out first; the commit then finds the nested
 * transaction open (`refuseLeftOpen` -> NestedTransactionOpenAtCommitError) and rolls back.
 * Only after that judgment does lib/transaction/request-transaction.ts `codeStatementsDone()`
 * wait for the INSERT (unbounded).
 *
 * Docs: docs/guides/data-layers.md: "Statements queued on one such client without awaiting ...
 * run in the order called, as node-postgres runs them ... the request's own commit waits (at
 * most `databaseTimeoutMs`) for the ends called before the handler answered
 * (`client.query('COMMIT'); client.release(); return …`)"; docs/guides/transactions.md: a
 * statement of the handler's still running "runs to its end, and the stored answer and
 * `COMMIT` are sent after it ... That wait is the handler's, bounded as its statements are
 * (`statement_timeout`), not by `databaseTimeoutMs`, whose deadline starts once it is done".
 *
 * Severity: medium (a request that can never complete: 500 on every try for work that, without
 * the library, commits; nothing lost or doubled; the 500 says a statement failed when none did).
 *
 * Fails now: 500 `transaction_aborted` after ~2 s, no row; the retry the same (runs = 2).
 * Control: the same with a fast statement (0.1 s): 201, both rows, replayed.
 *
 * Suggested fix: start the ends' bound once the code statements handed before each end are
 * done (`await this.codeStatementsDone()` before `settledWithin`), as the round-81 fix does for
 * the library's own statements.
 *
 * Fixed: the ends' bound counts only time in which no statement of the code runs on the
 * connection (`settledWithinIdle`, `idleSpent`: lib/data-layers/ends-in-flight.ts, used by
 * pool-transaction.ts `afterEndsInFlight`): the code's statements are often not yet handed to
 * node-postgres when the commit is called (the nested `SAVEPOINT` goes first), so waiting for
 * them once at the call, as suggested, was not enough.
 */
import { Controller, HttpCode, Module, Post, Query } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
const runs = new Map<string, number>();

@Controller('audit')
class AuditController {
  @Post()
  @HttpCode(201)
  @Idempotent()
  async create(@Query('n') n: string, @Query('seconds') seconds: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    const client = await pool.connect();
    void client.query('BEGIN').catch(() => undefined);
    void client
      .query(`INSERT INTO audit (note) SELECT $1 || '-nested' FROM pg_sleep($2::float8)`, [
        n,
        Number(seconds),
      ])
      .catch(() => undefined);
    void client.query('COMMIT').catch(() => undefined);
    client.release();
    return { n };
  }
}

describe('adversary 82 pool: a pipelined nested COMMIT behind a slow statement is judged left open', () => {
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
    fixture = await startPoolApp('adv82_pool_pipelined_nested', {
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

  async function post(n: string, seconds: number) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/audit?n=${n}&seconds=${seconds}`)
      .set('Idempotency-Key', `key-${n}`)
      .timeout(15_000);
    const body = answer.body as { code?: string; n?: string };
    return `${answer.status} ${body.code ?? body.n ?? ''}`;
  }

  async function scenario(n: string, seconds: number) {
    const first = await post(n, seconds);
    await new Promise((resolve) => setTimeout(resolve, seconds * 1_000 + 500));
    const retried = await post(n, seconds);
    const { rows } = await fixture.admin.query<{ note: string }>(
      `SELECT note FROM audit WHERE note LIKE $1 ORDER BY id`,
      [`${n}%`],
    );
    return { first, retried, runs: runs.get(n), rows: rows.map((row) => row.note) };
  }

  it('control: a fast statement: the nested COMMIT is waited for, 201, both rows, replayed', async () => {
    expect(await scenario('fast1', 0.1)).toEqual({
      first: '201 fast1',
      retried: '201 fast1',
      runs: 1,
      rows: ['fast1', 'fast1-nested'],
    });
  }, 60_000);

  it('a nested COMMIT queued behind a slow statement is waited for with it', async () => {
    expect(await scenario('slow1', 3)).toEqual({
      first: '201 slow1',
      retried: '201 slow1',
      runs: 1,
      rows: ['slow1', 'slow1-nested'],
    });
  }, 60_000);
});
