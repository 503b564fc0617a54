import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 24: on a database whose `statement_timeout` is shorter than the route's
 * `claimWaitMs` (a common production guard; here 300 ms against the default 1000 ms), a
 * duplicate of a `oneCommit` request still in flight is answered 503 `store_unavailable`,
 * with an ERROR log "idempotency store call claim failed: canceling statement due to
 * statement timeout", instead of the 409 with `Retry-After` the docs promise. The same
 * duplicate on the same database without the trigger (no statement_timeout) gets 409.
 *
 * What the app does (Express, node-postgres pool): `ALTER DATABASE … SET statement_timeout =
 * '300ms'`; `POST /transfers` is `@Idempotent({ oneCommit: true })`, works 1.5 s (in
 * process) and inserts its row. A client retries the same key 200 ms after the first send.
 *
 * What happens: the duplicate's claim waits on the key's advisory lock
 * (postgres-claim.store.ts:146-150, `SELECT pg_advisory_xact_lock(…)` before CLAIM), bounded
 * by `lock_timeout` only (claim-at-begin.ts:16-24 `claimWaitBounded`). The session's
 * statement_timeout cancels it first (57014), which claimIn does not take as "held"
 * (postgres-claim.store.ts:155 tests only 55P03), so it goes to `failureOf`
 * (idempotency-database.ts:319 logs it as a store failure) and the client gets 503
 * store_unavailable; no `conflict` event.
 *
 * What is expected (docs/reference/options.md `claimWaitMs`, docs/guides/transactions.md "A
 * duplicate waits for the first"): the duplicate waits at most claimWaitMs, then 409 with
 * Retry-After (the wait's own bound should be the smaller of the two, or a 57014 during that
 * wait read as held); the first's answer is unaffected.
 *
 * Severity: low-medium (wrong status and a false "store unavailable" ERROR for every
 * ordinary duplicate on a retryable path; no double effect).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Controller()
class TransfersController {
  @Post('transfers')
  @Idempotent({ oneCommit: true })
  async create(@Body() body: { ref: string }) {
    await sleep(1500);
    await pool.query('INSERT INTO transfers (ref) VALUES ($1)', [body.ref]);
    return { ref: body.ref };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [TransfersController],
})
class TransfersModule {}

describe('adversary 24: oneCommit duplicate under a statement_timeout shorter than claimWaitMs', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv24_stmt_timeout', {
      module: TransfersModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (key: string, ref: string) =>
    request(fixture.app.getHttpServer())
      .post('/transfers')
      .set('Idempotency-Key', key)
      .send({ ref });
  const count = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM transfers WHERE ref = $1', [ref])).rows[0]
        .count,
    );
  /** The first request, and a duplicate sent 200 ms after it while it still works. */
  const firstAndDuplicate = async (key: string, ref: string) => {
    const first = post(key, ref).then((r) => r);
    await sleep(200);
    const duplicate = await post(key, ref);
    return { first: await first, duplicate };
  };
  const setTimeoutOnDatabase = async (value: string) => {
    await fixture.admin.query(
      `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET statement_timeout = %L', current_database(), '${value}'); END $$`,
    );
    // Sessions read it at connect: the pool's idle connections are made anew.
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        const client = await pool.connect();
        client.release(true);
      }),
    );
  };

  it('control: no statement_timeout, the duplicate gets 409 with Retry-After', async () => {
    const { first, duplicate } = await firstAndDuplicate('adv24-st-control', 'control');
    expect(first.status).toBe(201);
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers['retry-after']).toBeDefined();
    expect(await count('control')).toBe(1);
  }, 30_000);

  it('statement_timeout 300ms: the duplicate gets 409 (fails: 503 store_unavailable)', async () => {
    await setTimeoutOnDatabase('300ms');
    const { first, duplicate } = await firstAndDuplicate('adv24-st-one', 'one');
    if (process.env.ADV_DEBUG) console.log(duplicate.status, duplicate.text);
    expect(first.status).toBe(201);
    expect(await count('one')).toBe(1);
    // Received: 503 {"code":"store_unavailable", …} (PostgreSQL: "canceling statement due to statement timeout")
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers['retry-after']).toBeDefined();
  }, 30_000);
});
