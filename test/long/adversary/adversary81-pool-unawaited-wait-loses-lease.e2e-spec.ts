/**
 * Adversary 81 (pool): while the library waits for a statement the handler left running
 * (`codeStatementsDone`, before the stored answer and `COMMIT`), nothing renews the key's
 * lease: on a default route (claim committed apart) a wait longer than `leaseMs` lets a retry
 * take the key over and run the handler a second time, while the first worker is alive and
 * about to commit; the first, whose handler answered 201, then answers 409 `lease_lost`, its
 * effects rolled back. The same statement awaited by the handler keeps the lease (heartbeat):
 * the retry gets 409 `key_in_progress` and the handler runs once.
 *
 *   @Post() @Idempotent({ leaseMs: 1_500 })
 *   async place(@Query('n') n: string) {
 *     runs += 1;                                   // an effect outside the database (an email)
 *     await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
 *     void pool.query('SELECT pg_sleep($1::float8)', [4]); // left running (or a Kysely read
 *     return { n };                                         // given up on, 'ignore query')
 *   }
 *
 * Code path: lib/transaction/request-transaction.ts `commitNow` -> `codeStatementsDone()`
 * (unbounded, by design "the handler's" time) runs once the handler has answered; the key's
 * heartbeat was stopped when the handler settled (lib/http/run-owned.ts `settle` ->
 * `stopHeartbeat()`), so nothing covers that wait and the lease runs out, a retry's claim takes the key over (fence moved), the handler runs
 * again there, and the first's fenced store finds the fence lost (`isFenceLost` -> rollback,
 * 409 `lease_lost`).
 *
 * Docs: docs/guides/transactions.md "Database work belongs before the answer": "A statement of
 * its code still running on the request's connection when the handler answers ... runs to its
 * end, and the stored answer and `COMMIT` are sent after it: what it wrote commits with the
 * answer, and the answer waits for it. That wait is the handler's"; the failure table: "the
 * lease was lost (no heartbeat, another worker took over) | 409 `lease_lost`": here the worker
 * was alive, and its handler's answer is thrown away. The promise: effects exactly once.
 *
 * Severity: high (a live request's handler runs twice: every effect outside the database (an
 * email, a call without a derived key) happens twice; the first client gets 409 `lease_lost`
 * for a handler that succeeded; on the default route, whatever the wait, once it exceeds
 * `leaseMs`).
 *
 * Fails now: first answers 409 `lease_lost` after ~4 s; a retry sent 2 s in (after one lease)
 * runs the handler again (runs = 2) and answers 201 after its own 4 s wait. Control: the same
 * 4 s statement awaited by the handler: first 201, the retry 409 `key_in_progress`, runs = 1.
 *
 * Suggested fix: keep the heartbeat (the lease renewal apart) going until the stored answer's
 * statement is sent, as while the handler runs; the wait for the code's statements is the
 * handler's time, so it must be covered by what covers the handler's time.
 *
 * Fixed: the heartbeat stops once the statements its handler left running are done
 * (`RequestTransaction.afterCodeStatements`, called where run-owned.ts settles and where the
 * answer's commit starts), not when the handler settles: the wait is the handler's time, and the
 * lease is renewed through it. Now in one place for every surface (routes, GraphQL fields, jobs,
 * ticks): the stop `LeaseRenewals.heartbeat` returns waits for them (`heartbeatStop`,
 * lib/claim/lease-renewals.ts); see test/graphql-left-running-lease.e2e-spec.ts and its siblings.
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
  @Post('unawaited')
  @HttpCode(201)
  @Idempotent({ leaseMs: 1_500 })
  async unawaited(@Query('n') n: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    void pool.query('SELECT pg_sleep($1::float8)', [4]).catch(() => undefined);
    return { n };
  }

  @Post('awaited')
  @HttpCode(201)
  @Idempotent({ leaseMs: 1_500 })
  async awaited(@Query('n') n: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    await pool.query('SELECT pg_sleep($1::float8)', [4]);
    return { n };
  }
}

describe('adversary 81 pool: the wait for a statement left running loses the lease', () => {
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
    fixture = await startPoolApp('adv81_pool_wait_lease', {
      module: AuditModule,
      max: 8,
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

  async function post(route: string, n: string) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/audit/${route}?n=${n}`)
      .set('Idempotency-Key', `key-${n}`)
      .timeout(15_000);
    return `${answer.status} ${(answer.body as { code?: string }).code ?? ''}`.trim();
  }

  async function scenario(route: 'unawaited' | 'awaited') {
    const n = `${route}1`;
    const first = post(route, n);
    await new Promise((resolve) => setTimeout(resolve, 2_000)); // past one lease
    const retried = await post(route, n);
    const firstAnswer = await first;
    const { rows } = await fixture.admin.query(`SELECT 1 FROM audit WHERE note = $1`, [n]);
    return { first: firstAnswer, retried, runs: runs.get(n), written: rows.length };
  }

  it('control: the same statement awaited keeps the lease: the retry waits, one run', async () => {
    expect(await scenario('awaited')).toEqual({
      first: '201',
      retried: '409 key_in_progress',
      runs: 1,
      written: 1,
    });
  }, 60_000);

  it('a statement left running never costs the lease', async () => {
    expect(await scenario('unawaited')).toEqual({
      first: '201',
      retried: '409 key_in_progress',
      runs: 1,
      written: 1,
    });
  }, 60_000);
});
