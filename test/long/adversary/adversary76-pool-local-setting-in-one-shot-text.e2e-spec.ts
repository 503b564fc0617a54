/**
 * Adversary 76: a one-shot text through `pool.query()` that bounds its own read with `SET LOCAL
 * statement_timeout` (node-postgres runs a text of several statements in one implicit
 * transaction, which the setting ends with) leaves that timeout on every later statement of an
 * `@Idempotent()` request: a later write that takes longer than it fails with 57014, a passing
 * failure, and the request answers 503 on every try (each retry runs into the same timeout).
 * Without the library: 201, the row committed.
 *
 *   // a bounded report read: the timeout is this text's own
 *   const [, report] = await pool.query(
 *     "SET LOCAL statement_timeout = '200ms'; SELECT count(*)::int AS n FROM notes",
 *   );
 *   // then a write that takes longer than 200 ms (here: 0.5 s of server work)
 *   await pool.query('INSERT INTO notes (tag) SELECT $1 FROM pg_sleep(0.5)', [tag]);
 *   return { tag, before: report.rows[0].n };
 *
 * Why: `PoolTransaction.statement` sends the text (not a plain read: two statements) into the
 * request's transaction as it is (`from === null`, outside any nested transaction); only a
 * transaction mode alone (`isTransactionModeOnly`) is sent apart, and only session-level
 * settings are refused (`sessionSettingOf` in `refusalOf`). The `SET LOCAL` then lasts to the
 * request's end: every later statement of the handler's (and the library's own) runs under a
 * 200 ms `statement_timeout`. Nothing puts it back after the text, as its implicit transaction
 * would have without the library (a nested transaction's `COMMIT` puts back what its
 * statements set: `NestedCommit`; the pool's own texts get no such treatment).
 *
 * Expected (docs/guides/data-layers.md): "`pool.query()` runs on the request's connection, in
 * its transaction" and "Outside an idempotent request the pool is exactly as it was"; the
 * setting-related refusals and restores are documented for nested transactions only (a text of
 * `pool.query()` is no transaction of its code's). The brief: "nothing is lost"; here the
 * write is refused on every try.
 *
 * Control: without `@Idempotent()`: 201, one row; keyed, the read without its `SET LOCAL`:
 * 201, one row.
 *
 * Severity: medium (a 503 on every retry for code that is correct without the library: the
 * request can never succeed; nothing committed twice). The same path carries `SET LOCAL
 * lock_timeout`, `SET LOCAL ROLE` (a role-bounded report read, after which the handler's writes
 * run as that role) and `set_config(…, true)` into the rest of the request.
 *
 * Fails now: keyed: 503 `database_transient` (57014, "canceling statement due to statement
 * timeout", on the INSERT), no row; the retry the same 503.
 *
 * Suggested fix: for a text of `pool.query()` outside any nested transaction (and a view's
 * with none open) that sets a setting or role for the transaction (`statementStepsOf`'s
 * `settings`/`identity`), put those settings back after it in the same round trip (as
 * `NestedCommit` does at a nested COMMIT: read with `READ_SETTINGS` before, restored after), or
 * wrap the text in a savepoint of its own released after it with the settings restored; or
 * refuse it with an error that says to run it in a transaction of its own.
 *
 * Fixed: a text of several statements outside any nested transaction that sets something for
 * the transaction has it kept before and put back right behind it on the connection
 * (`oneShotSettingsOf`, lib/data-layers/one-shot-settings.ts; `keepOneShot`).
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool, type QueryResult } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body76 = { tag: string; unbounded?: boolean };

async function work(pool: Pool, { tag, unbounded }: Body76) {
  const read = 'SELECT count(*)::int AS n FROM adv76pls_notes';
  const results = (await pool.query(
    unbounded ? read : `SET LOCAL statement_timeout = '200ms'; ${read}`,
  )) as unknown as QueryResult<{ n: number }> | QueryResult<{ n: number }>[];
  const report = Array.isArray(results) ? results[results.length - 1] : results;
  await pool.query('INSERT INTO adv76pls_notes (tag) SELECT $1 FROM pg_sleep(0.5)', [tag]);
  return { tag, before: report.rows[0].n >= 0 };
}

@Controller()
class NotesController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body76) {
    return work(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: Body76) {
    return work(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class NotesModule {}

describe('adversary 76: SET LOCAL in a one-shot text of pool.query()', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_local_setting', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv76pls_notes (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const notes = async (tag: string) =>
    Number(
      (
        await fixture.admin.query<{ count: string }>(
          'SELECT count(*) FROM adv76pls_notes WHERE tag = $1',
          [tag],
        )
      ).rows[0].count,
    );

  const post = (path: string, key: string | undefined, body: Body76) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(): 201, the row committed', async () => {
    const tag = 'plain';
    const answer = await post('/plain', undefined, { tag });
    expect({ status: answer.status, notes: await notes(tag) }).toEqual({ status: 201, notes: 1 });
  }, 30_000);

  it('control: keyed, the read without its SET LOCAL: 201', async () => {
    const tag = 'keyed-unbounded';
    const answer = await post('/keyed', tag, { tag, unbounded: true });
    expect({ status: answer.status, notes: await notes(tag) }).toEqual({ status: 201, notes: 1 });
  }, 30_000);

  it('keyed, the read bounded by its own SET LOCAL: 201, as without the library', async () => {
    const tag = 'keyed-bounded';
    const first = await post('/keyed', tag, { tag });
    const retry = await post('/keyed', tag, { tag });
    expect({
      first: first.status,
      firstBody: first.status === 201 ? undefined : (first.body as unknown),
      retry: retry.status,
      notes: await notes(tag),
    }).toEqual({ first: 201, firstBody: undefined, retry: 201, notes: 1 });
  }, 30_000);
});
