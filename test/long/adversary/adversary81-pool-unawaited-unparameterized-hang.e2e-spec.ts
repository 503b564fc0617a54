/**
 * Adversary 81 (pool): ONE fire-and-forget statement hangs the request for ever when it is not
 * one the BEGIN can carry: a statement without parameters (`void pool.query("INSERT INTO audit
 * (note) VALUES ('created')")`, a `NOTIFY`, a `REFRESH MATERIALIZED VIEW`), or any first
 * statement on a route above READ COMMITTED (`@Idempotent({ isolationLevel: 'REPEATABLE READ'
 * })`, whose BEGIN waits for a lease renewal first). The handler's answer is never sent, the
 * request's connection never given back, and the key is held while the process lives (409 to
 * every retry); `app.close()` hangs as well.
 *
 *   @Post() @Idempotent()
 *   async create(@Query('n') n: string) {
 *     void pool.query(`INSERT INTO audit (note) VALUES ('created')`); // audit on the side
 *     await this.cache.set(...); // anything that takes an event-loop tick or more
 *     return { n };
 *   }
 *
 * Code path: lib/transaction/request-transaction.ts `sendNow`: a statement `carriedStatement`
 * refuses (no values; or `waitsBeforeBegin()`) goes `this.begin(client).then(after)`, and `send`
 * notes it as running on the connection (`runningOnConnection`, `ended` still false). The
 * handler answers while that BEGIN is on its way: `commitWith` sets `state = 'ending'`,
 * `commitNow` awaits `this.beginning` then `codeStatementsDone()`. When BEGIN completes, the
 * statement's `after` sees `this.ended` and goes `apart()` -> `afterEnd()` -> `await
 * this.ending`, the very commit that waits for it in `codeStatementsDone()` (unbounded by
 * design). A deadlock of two promises: nothing ever times out.
 *
 * Docs: docs/guides/transactions.md "Database work belongs before the answer": "Work a handler
 * starts and does not await (an event listener, a timer) joins the request's transaction while
 * it is open"; "A statement of such work that arrives while the commit is under way waits for
 * its outcome, then runs on a connection of its own if the request committed". The promise:
 * nothing hangs or holds a key for ever.
 *
 * Severity: critical (one unawaited literal statement, the most ordinary fire-and-forget, hangs
 * every such request for ever and leaks its connection: the pool is soon exhausted, and every
 * route answers 503; the key answers 409 until a restart).
 *
 * Fails now: for handlers that answer 0..5 event-loop ticks after the unawaited statement, on
 * the default route (a literal INSERT) and on a REPEATABLE READ route (a parameterized one):
 * most of the k >= 1 requests (8 of 10 in one run, 10 of 10 in another) never answer (the
 * client's 3 s timeout fires), no row is written, the retry answers 409; k=0 answers 201.
 * Control: the same statements awaited answer 201, write the row, and replay.
 *
 * The same without any unawaited code: a route at REPEATABLE READ whose first write is given up
 * on through Kysely's default 'ignore query' abort (`execute(db, { signal })`, as
 * docs/guides/kysely.md recommends) while its BEGIN is on its way (a lease renewal, then the
 * BEGIN's round trip): with `AbortSignal.timeout(1..2 ms)` the request hangs, 409 to the retry
 * (under a loaded database the window is as long as that renewal and round trip). Third case.
 *
 * Suggested fix: as in adversary81-pool-unawaited-pair-deadlock: note a statement as running
 * on the connection only once it is handed to node-postgres (in `after`, when `query.apply`
 * runs), not at `send`; a statement that goes `apart()` must never be waited for by the end.
 *
 * Fixed: a statement of its code is noted as running on the request's connection once it is
 * handed to node-postgres (`runningOnConnection` in `sendNow`'s hand-off and the carried first
 * statement), not when its code calls: one still waiting for the BEGIN that then runs apart
 * after the end is never waited for by the commit it waits for (lib/transaction/request-transaction.ts).
 */
import { Controller, HttpCode, Module, Post, Query } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
let db: Kysely<{ audit: { note: string } }>;

async function ticks(k: number) {
  for (let i = 0; i < k; i += 1) await new Promise((resolve) => setImmediate(resolve));
}

function audit(route: string, n: string) {
  return route.startsWith('literal')
    ? pool.query(`INSERT INTO audit (note) VALUES ('${n}')`) // n: [a-z0-9] only
    : pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
}

@Controller('audit')
class AuditController {
  @Post('literal')
  @HttpCode(201)
  @Idempotent()
  async literal(@Query('n') n: string, @Query('k') k: string) {
    void audit('literal', n).catch(() => undefined); // not awaited on purpose
    await ticks(Number(k));
    return { n };
  }

  @Post('isolated')
  @HttpCode(201)
  @Idempotent({ isolationLevel: 'REPEATABLE READ' })
  async isolated(@Query('n') n: string, @Query('k') k: string) {
    void audit('isolated', n).catch(() => undefined); // not awaited on purpose
    await ticks(Number(k));
    return { n };
  }

  /** No unawaited code: a write given up on with Kysely's default 'ignore query' abort. */
  @Post('kysely')
  @HttpCode(201)
  @Idempotent({ isolationLevel: 'REPEATABLE READ' })
  async kysely(@Query('n') n: string, @Query('k') k: string) {
    try {
      await sql`INSERT INTO audit (note) VALUES (${n})`.execute(db, {
        signal: AbortSignal.timeout(Math.max(1, Number(k))),
      } as never);
    } catch {
      // given up on: answer without waiting for it
    }
    return { n };
  }

  @Post('literal-awaited')
  @HttpCode(201)
  @Idempotent()
  async literalAwaited(@Query('n') n: string, @Query('k') k: string) {
    const written = audit('literal', n);
    await ticks(Number(k));
    await written;
    return { n };
  }

  @Post('isolated-awaited')
  @HttpCode(201)
  @Idempotent({ isolationLevel: 'REPEATABLE READ' })
  async isolatedAwaited(@Query('n') n: string, @Query('k') k: string) {
    const written = audit('isolated', n);
    await ticks(Number(k));
    await written;
    return { n };
  }
}

describe('adversary 81 pool: one unawaited statement the BEGIN does not carry hangs the request', () => {
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
    fixture = await startPoolApp('adv81_pool_unawaited_unparam', {
      module: AuditModule,
      max: 20,
      usePool: (started) => {
        pool = started;
        db = new Kysely({ dialect: new PostgresDialect({ pool: started }) });
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE audit (id bigserial PRIMARY KEY, note text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(route: string, n: string, k: number) {
    try {
      const answer = await request(fixture.app.getHttpServer())
        .post(`/audit/${route}?n=${n}&k=${k}`)
        .set('Idempotency-Key', `key-${n}`)
        .timeout(3_000);
      return answer.status;
    } catch (error) {
      return (error as Error).message;
    }
  }

  async function written(n: string) {
    await new Promise((resolve) => setTimeout(resolve, 200)); // a row written apart, if any
    const { rows } = await fixture.admin.query(`SELECT 1 FROM audit WHERE note = $1`, [n]);
    return rows.length;
  }

  async function run(routes: string[]) {
    const seen: Record<string, unknown> = {};
    const expected: Record<string, unknown> = {};
    for (const route of routes) {
      for (let k = 0; k <= 5; k += 1) {
        const n = `${route.replace('-', '')}${k}`;
        const first = await post(route, n, k);
        const retried = await post(route, n, k);
        seen[n] = { first, retried, written: await written(n) };
        expected[n] = { first: 201, retried: 201, written: 1 };
      }
    }
    return { seen, expected };
  }

  it('control: the same statements awaited answer 201, write the row and replay', async () => {
    const { seen, expected } = await run(['literal-awaited', 'isolated-awaited']);
    expect(seen).toEqual(expected);
  }, 120_000);

  it("a write given up on with Kysely's 'ignore query' on a REPEATABLE READ route never hangs", async () => {
    const { seen, expected } = await run(['kysely']);
    expect(seen).toEqual(expected);
  }, 120_000);

  it('one unawaited statement never hangs the request nor holds its key', async () => {
    const { seen, expected } = await run(['literal', 'isolated']);
    expect(seen).toEqual(expected);
  }, 120_000);
});
