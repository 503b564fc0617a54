/**
 * Adversary 77: an operator (a DBA's `pg_cancel_backend`, a lock watchdog, PgBouncer's
 * `query_timeout`, which sends PostgreSQL's cancel request) cancels a keyed request's statement
 * stuck behind a lock. The library answers 500 `transaction_aborted`, no `Retry-After` ("the
 * retry meets the same cancel"), where the very same passing abort by `lock_timeout` answers
 * 503 `database_transient` with `Retry-After: 1`, and the retry (lock gone) succeeds at once.
 *
 *   @Post('transfer') @Idempotent()
 *   async transfer(@Body() { tag }) {
 *     await pool.query('INSERT INTO transfers (tag) VALUES ($1)', [tag]);
 *     await pool.query('UPDATE accounts SET balance = balance - 1 WHERE id = 1'); // waits on a lock
 *     return { tag };
 *   }
 *   -- meanwhile, psql: SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock';
 *
 * Why: `isCancelAskedFor` (lib/connection/connection-errors.ts) takes every 57014 "canceling
 * statement due to user request" for the app's own cancel (Kysely's 'cancel query' abort), and
 * `failure.ts` answers it `IdempotencyTransactionAbortedError` (500); `isTransientError` no
 * longer counts it. A cancel request carries nothing that says who sent it: PostgreSQL reports
 * the same message for an operator's `pg_cancel_backend`, PgBouncer's `query_timeout`, or any
 * cancel request. Only the request's own code could know, and the library does not ask it.
 *
 * Docs (docs/guides/data-layers.md, Errors): "A passing failure (a serialization failure, a
 * deadlock, a lost connection) rolls back and answers 503 with `Retry-After`; nothing is stored
 * and the retry runs once. A statement cancelled by the app itself (… Kysely's 'cancel query'
 * abort …) is no passing failure … 500 `transaction_aborted` (… the retry meets the same
 * cancel)." - here the app cancelled nothing, and the retry meets no cancel.
 *
 * Control: the same wait ended by `SET LOCAL lock_timeout` (55P03): 503 `database_transient`,
 * `Retry-After`; and the retry after the operator's cancel, the lock gone: 201.
 *
 * Severity: low (a wrong status class: a client or gateway that retries 503s only gives up on
 * a request that would succeed; nothing stored either way).
 *
 * Fails now: the operator's cancel: 500 `transaction_aborted`, no Retry-After.
 *
 * Suggested fix: count a 57014 "due to user request" as the app's own only when the request's
 * code asked for it (Kysely's abort: a control query `pg_cancel_backend(<the request's pid>)`
 * seen on the seam, or a cancel sent through a view), and as a passing failure (503) otherwise.
 *
 * Fixed: a 57014 "due to user request" is a passing failure (503 `database_transient`,
 * `Retry-After`) unless the request's own code asked for it. The library sees that ask: the
 * pool's client class is watched (lib/data-layers/cancel-watch.ts, installed with the pool's
 * join), so a `pg_cancel_backend(<pid>)` or `pg_terminate_backend(<pid>)` sent through the
 * pool's clients (Kysely's control client is `new pool.Client()`) in a request's scope, of
 * that request's own backend, is noted on its connection (`RequestTransaction.cancelAsked`,
 * lib/connection/cancel-asked.ts), and the errors that connection meets for it are marked the
 * app's own (`markAskedByApp`); `isCancelAskedForError` (lib/connection/connection-errors.ts)
 * reads that mark, no longer the message. An operator's cancel passes through none of it.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;

type Body77 = { tag: string; lockTimeout?: boolean };

@Controller()
class TransfersController {
  @Post('keyed')
  @Idempotent()
  async keyed(@Body() { tag, lockTimeout }: Body77) {
    await pool.query('INSERT INTO adv77cancel_transfers (tag) VALUES ($1)', [tag]);
    if (lockTimeout) await pool.query("SET LOCAL lock_timeout = '300ms'");
    await pool.query('UPDATE adv77cancel_accounts SET balance = balance - 1 WHERE id = 1');
    return { tag };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [TransfersController],
})
class TransfersModule {}

describe("adversary 77: an operator's cancel of a keyed request's statement", () => {
  let fixture: PoolApp;
  let locker: pg.Client;

  beforeAll(async () => {
    fixture = await startPoolApp('adv77_operator_cancel', {
      module: TransfersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv77cancel_transfers (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE adv77cancel_accounts (id int PRIMARY KEY, balance int NOT NULL);
          INSERT INTO adv77cancel_accounts VALUES (1, 100);`);
      },
    });
    locker = new pg.Client({ connectionString: fixture.database.url });
    await locker.connect();
  }, 60_000);

  afterAll(async () => {
    await locker?.end().catch(() => undefined);
    await fixture?.close();
  });

  /** Holds the account's row lock while `run` goes. */
  const withLock = async <T>(run: () => Promise<T>): Promise<T> => {
    await locker.query('BEGIN');
    await locker.query('SELECT * FROM adv77cancel_accounts WHERE id = 1 FOR UPDATE');
    try {
      return await run();
    } finally {
      await locker.query('ROLLBACK');
    }
  };

  /** The backend of this database waiting on a lock, once there is one (polled, bounded). */
  const waiting = async (): Promise<number> => {
    for (let i = 0; i < 400; i++) {
      const { rows } = await fixture.admin.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      );
      if (rows.length > 0) return rows[0].pid;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    throw new Error('no backend waiting on the lock');
  };

  const post = (key: string, body: Body77) =>
    request(fixture.app.getHttpServer())
      .post('/keyed')
      .set('Idempotency-Key', key)
      .send(body)
      .then((answer) => answer);

  const summary = (answer: request.Response) => ({
    status: answer.status,
    code: (answer.body as { code?: string }).code,
    retryAfter: answer.headers['retry-after'] as string | undefined,
  });

  it('control: the wait ended by lock_timeout: 503 database_transient, Retry-After', async () => {
    const answer = await withLock(() =>
      post('adv77-cancel-timeout', { tag: 't', lockTimeout: true }),
    );
    expect(summary(answer)).toEqual({ status: 503, code: 'database_transient', retryAfter: '1' });
  }, 30_000);

  it("an operator's cancel: 503 database_transient, Retry-After, and the retry succeeds", async () => {
    const key = 'adv77-cancel-operator';
    const answer = await withLock(async () => {
      const answering = post(key, { tag: 'op' });
      const pid = await waiting();
      await fixture.admin.query('SELECT pg_cancel_backend($1)', [pid]);
      return answering;
    });
    const retry = await post(key, { tag: 'op' });
    expect({ first: summary(answer), retry: retry.status }).toEqual({
      first: { status: 503, code: 'database_transient', retryAfter: '1' },
      retry: 201,
    });
  }, 30_000);
});
