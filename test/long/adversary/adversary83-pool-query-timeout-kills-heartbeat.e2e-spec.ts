/**
 * Adversary 83 (pool): on a `oneCommit` route, with node-postgres' `query_timeout` on the Pool
 * (every statement of its clients bounded, the library's too), a statement the handler gave
 * up on (read timeout caught) still runs on the request's connection, and the heartbeat's
 * renewal, sent inside the claim's transaction, queues behind it. node-postgres' read timeout
 * rejects that queued renewal too ('Query read timeout', taken off the queue, never run), and
 * the heartbeat reads any failure of a renewal inside the transaction as the transaction
 * aborted: it stops for good. The claim's transaction bounds its idleness by the lease
 * (`idle_in_transaction_session_timeout`, "a live worker's heartbeat renews inside it every
 * third of that"): once the statement ends, the handler's next second or two of work without
 * a statement (a call out, a computation) outlasts the lease, PostgreSQL ends the session, and
 * the request answers 503; every retry does the same. Without the library: 201.
 *
 *   const pool = new pg.Pool({ connectionString, query_timeout: 300 });
 *   @Post() @Idempotent({ oneCommit: true })
 *   async create(@Query('n') n: string) {
 *     await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
 *     try { await pool.query('SELECT slow_enrichment()'); } catch { /* read timeout *\/ }
 *     await callOut();                                  // 3 s, no statement
 *     await pool.query('UPDATE audit SET done = true WHERE note = $1', [n]);
 *     return { n };
 *   }
 *
 * Code path: lib/claim/lease-renewals.ts:164 (`renew` inside: `extendLeaseIn(...).catch`):
 * an error that is not `isTransactionAbortedError` -> `clearInterval(timer); throw`: the
 * renewal rejected by node-postgres' read timeout (`stillRunningAfter`, lib/transaction/
 * still-running.ts) is taken for an aborted transaction; lib/transaction/claim-at-begin.ts:102
 * `idleBound` then ends the session once the handler idles for a lease.
 *
 * Docs: docs/guides/transactions.md (oneCommit) "the claim's transaction sets its own
 * `idle_in_transaction_session_timeout` to the lease (a live worker's heartbeat renews inside
 * it every third of that)"; data-layers.md "node-postgres' per-query `query_timeout` ...
 * bounds the statement as without the library ... It stops only the wait".
 *
 * Severity: medium (a oneCommit route with a Pool `query_timeout` and one slow optional read
 * answers 503 on every try once its handler then works a lease without a statement).
 *
 * Failed before the fix: 503 store_unavailable on the first try and on the retry, no row.
 * Control: the same handler whose read ends within the timeout: 201, one row, replayed. (And
 * the failing case with a 10 s lease answers 201: the session's idle bound, not the
 * read itself, is what ends it.)
 *
 * Suggested fix: in `renew`, a renewal rejected with node-postgres' read timeout
 * (`stillRunningAfter`) left the transaction as it was: keep the heartbeat (return true, as
 * for an aborted transaction); or send the renewals inside with no client read timeout (a
 * `query_timeout` of 0 on the renewal's own config does not override the client's: bound it
 * with the library's own deadline instead).
 *
 * Fixed: `afterFailedRenewalInside` (lib/claim/lease-renewals.ts, table-tested) goes on after a
 * renewal rejected with the read timeout, as after one queued behind a failed savepoint: it
 * left the transaction as it was, and while renewals go inside the transaction holds the key's
 * row, so a renewal that never ran lets no takeover pass; the next tick renews (85c18a5).
 */
import { Controller, HttpCode, Module, Post, Query } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

let pool: Pool;
const runs = new Map<string, number>();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Controller('audit')
class AuditController {
  @Post(':route')
  @HttpCode(201)
  @Idempotent({ oneCommit: true })
  async create(@Query('n') n: string, @Query('read') read: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    try {
      await pool.query(`SELECT pg_sleep(${Number(read)})`);
    } catch {
      // Query read timeout: answer without the enrichment
    }
    await sleep(3_000); // a call out, no statement
    await pool.query('UPDATE audit SET done = true WHERE note = $1', [n]);
    return { n };
  }
}

describe('adversary 83 pool: a read timeout on a renewal queued behind a given-up statement stops the heartbeat', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1_000, leaseMs: 1_500 }),
        }),
      ],
      controllers: [AuditController],
    })
    class AuditModule {}
    fixture = await startPoolApp('adv83_pool_query_timeout_heartbeat', {
      module: AuditModule,
      max: 6,
      usePool: (started) => {
        pool = createTestPool({ ...started.options, max: 6, query_timeout: 300 });
        pool.on('error', () => undefined);
      },
      setup: async (owner) => {
        await owner.query(
          `CREATE TABLE audit (id bigserial PRIMARY KEY, note text NOT NULL, done boolean NOT NULL DEFAULT false)`,
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
    await endTestPool(pool);
  }, 60_000);

  async function post(n: string, read: number) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/audit/x?n=${n}&read=${read}`)
      .set('Idempotency-Key', `key-${n}`)
      .timeout(15_000);
    const body = answer.body as { code?: string; n?: string };
    return `${answer.status} ${body.code ?? body.n ?? ''}`;
  }

  async function scenario(n: string, read: number) {
    const first = await post(n, read);
    const retried = await post(n, read);
    const { rows } = await fixture.admin.query(`SELECT 1 FROM audit WHERE note = $1 AND done`, [n]);
    return { first, retried, runs: runs.get(n), written: rows.length };
  }

  it('control: the read ends within the timeout: 201, one row, replayed', async () => {
    expect(await scenario('fast1', 0.05)).toEqual({
      first: '201 fast1',
      retried: '201 fast1',
      runs: 1,
      written: 1,
    });
  }, 60_000);

  it('a read given up on through query_timeout keeps the heartbeat, never a 503', async () => {
    expect(await scenario('slow1', 1)).toEqual({
      first: '201 slow1',
      retried: '201 slow1',
      runs: 1,
      written: 1,
    });
  }, 60_000);
});
