/**
 * Adversary 83 (pool): on a `oneCommit` route, a handler that fails (its error stored with the
 * claim) while a statement it left running still runs is never answered before that statement
 * ends: its effects are undone behind it with no deadline and no cancel. A statement that
 * waits on a lock another session holds (no `lock_timeout`, the default) holds the request,
 * its connection and its key, the heartbeat renewing the lease, for as long as that lock is
 * held: every retry 409 `key_in_progress`. The same handler on a default route is rolled back
 * at `databaseTimeoutMs` (the `ROLLBACK`'s deadline cancels the statement) and answers its
 * stored 400 (the control).
 *
 *   @Post() @Idempotent({ oneCommit: true })
 *   async create(@Body() dto) {
 *     void pool.query('UPDATE stock SET n = n - 1 WHERE id = 1').catch(() => {}); // fire and forget
 *     if (!dto.ok) throw new BadRequestException('refused');        // validation after it
 *   }
 *
 * Code path: lib/transaction/commit-answer.ts:89 `withoutEffects` -> lib/transaction/
 * request-transaction.ts:542 `undoEffects`: `await this.codeStatementsDone()` (unbounded,
 * nothing cancels) before `ROLLBACK TO SAVEPOINT` (whose `queryWithDeadline` would cancel);
 * the default route's `rollback` -> `rollbackOn` (request-transaction.ts:944) sends the
 * `ROLLBACK` at once under `queryWithDeadline`, which cancels the statement at the deadline.
 * The heartbeat's stop waits for the same statements (`afterCodeStatements`, lease-renewals.ts
 * `heartbeatStop`), so the key is renewed for as long as it runs.
 *
 * Docs: docs/guides/transactions.md "A handler that fails with such a statement running is
 * rolled back behind it too (a `ROLLBACK` cancels it at its `databaseTimeoutMs` deadline),
 * its lease renewed meanwhile, and its key is given back (or its error stored) only after
 * that"; oneCommit: "Errors are stored as before".
 *
 * Severity: medium-high (a failed request on a `oneCommit` route hangs, key held, as long as a
 * lock elsewhere is held; without the library it answers 400 at once; a default route answers
 * it within `databaseTimeoutMs`).
 *
 * Failed before the fix: no answer within 6 s (the request still waits on the lock); a retry
 * meanwhile gets 409 key_in_progress.
 *
 * Suggested fix: in `undoEffects`, as in `rollbackOn`, send the `ROLLBACK TO SAVEPOINT` behind
 * the statements still running under `queryWithDeadline` (its deadline cancels them) rather
 * than awaiting `codeStatementsDone()` first; or bound that wait by `databaseTimeoutMs` and
 * cancel on its expiry.
 *
 * Fixed: `undoEffects` waits for the statements left running at most `databaseTimeoutMs`
 * (`codeStatementsDoneOrCancelled`), then cancels the one running (deadline.ts `cancelled`)
 * and rolls back to the savepoint: the claim kept, the 400 stored. (Sending the rollback at
 * once under `queryWithDeadline` would drop the connection and the claim with it at the
 * deadline: a 503.) (f05dea0)
 */
import { BadRequestException, Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;

@Controller('stock')
class StockController {
  @Post('default')
  @HttpCode(201)
  @Idempotent()
  plain(@Body() body: { ok: boolean }) {
    void pool.query('UPDATE stock SET n = n - 1 WHERE id = 1').catch(() => undefined);
    if (!body.ok) throw new BadRequestException('refused');
    return { ok: true };
  }

  @Post('one')
  @HttpCode(201)
  @Idempotent({ oneCommit: true })
  one(@Body() body: { ok: boolean }) {
    void pool.query('UPDATE stock SET n = n - 1 WHERE id = 1').catch(() => undefined);
    if (!body.ok) throw new BadRequestException('refused');
    return { ok: true };
  }
}

describe('adversary 83 pool: a oneCommit handler that fails with a statement left running waits on it unbounded', () => {
  let fixture: PoolApp;
  let holder: Client | undefined;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1_000, leaseMs: 1_500 }),
        }),
      ],
      controllers: [StockController],
    })
    class StockModule {}
    fixture = await startPoolApp('adv83_pool_one_commit_left_running', {
      module: StockModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query(`CREATE TABLE stock (id int PRIMARY KEY, n int NOT NULL)`);
        await owner.query(`INSERT INTO stock VALUES (1, 100)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await holder?.query('ROLLBACK').catch(() => undefined);
    await fixture?.close();
  }, 60_000);

  /** Another session holds the row's lock for the scenario (a long report, a stuck worker). */
  async function scenario(route: 'default' | 'one', key: string) {
    holder = fixture.admin;
    await holder.query('BEGIN');
    await holder.query('SELECT * FROM stock WHERE id = 1 FOR UPDATE');
    try {
      const started = Date.now();
      const first = await request(fixture.app.getHttpServer())
        .post(`/stock/${route}`)
        .set('Idempotency-Key', key)
        .send({ ok: false })
        .timeout(6_000)
        .then(
          (answer) => `${answer.status}`,
          () => 'no answer within 6 s',
        );
      const within3s = Date.now() - started < 3_000;
      const retried = await request(fixture.app.getHttpServer())
        .post(`/stock/${route}`)
        .set('Idempotency-Key', key)
        .send({ ok: false })
        .timeout(6_000)
        .then(
          (answer) => `${answer.status} ${(answer.body as { code?: string }).code ?? ''}`,
          () => 'no answer within 6 s',
        );
      return { first, within3s, retried };
    } finally {
      await holder.query('ROLLBACK');
      holder = undefined;
    }
  }

  it('control: a default route is rolled back at the deadline and answers its 400, replayed', async () => {
    expect(await scenario('default', 'k-default')).toEqual({
      first: '400',
      within3s: true,
      retried: '400 ',
    });
  }, 30_000);

  it('a oneCommit route that fails with a statement left running answers its 400 within the deadline', async () => {
    expect(await scenario('one', 'k-one')).toEqual({
      first: '400',
      within3s: true,
      retried: '400 ',
    });
  }, 30_000);
});
