/**
 * Adversary 76: node-postgres code whose last act is a nested transaction's `COMMIT` that it
 * does not await (its failure logged), the client given back, the handler returning at once,
 * answers 500 `transaction_aborted` with nothing stored, on every try. Without the library:
 * 201, the row committed (node-postgres runs the `COMMIT` it was handed). Keyed with the
 * `COMMIT` awaited: 201, the same row.
 *
 *   const client = await pool.connect();
 *   await client.query('BEGIN');                        // a savepoint of the request's
 *   await client.query(`INSERT … 'order'`, [tag]);
 *   client.query('COMMIT').catch(log);                  // not awaited: pg runs it in order
 *   client.release();
 *   return { tag };
 *
 * Why: the request's commit (`RequestTransaction.commitWith` → `PoolTransaction.refuseLeftOpen`)
 * checks `this.savepoints` at once when the handler's answer is in. The nested transaction's
 * savepoint leaves the books only once its `RELEASE SAVEPOINT` round trip is back
 * (`endSavepoint`'s `pop()` after `await this.statement(…)`), a round trip after the `COMMIT`
 * was called; nothing waits for the ends still in flight (`EndsInFlight`) before the check.
 * So the request is refused with `NestedTransactionOpenAtCommitError` though the code ended
 * every transaction it began, in call order, before it returned.
 *
 * Expected (docs/guides/data-layers.md): "And what is called after a nested transaction's
 * `COMMIT` or `ROLLBACK` that is not awaited (…) runs after it, and is judged as after it: not
 * inside the transaction its code had ended, nor beside it." The request's own commit is called
 * after it, and finds it open.
 *
 * (docs/reference/problems.md has "the handler answered while a nested transaction its code
 * began (…) was still open: work it did not await" → 500 `NestedTransactionOpenAtCommitError`;
 * here the code had called its end before answering, which the data-layers page promises is
 * judged as called: the request's own commit is called after that `COMMIT`.)
 *
 * Control: without `@Idempotent()`: 201, ['order']; keyed with the `COMMIT` awaited: 201,
 * ['order'].
 *
 * Severity: medium (a false 500 on every try, nothing kept: the order the code committed is
 * lost to the user, who retries into the same 500; nothing runs twice).
 *
 * Fails now: keyed, not awaited: 500 (`transaction_aborted`, the refusal (seen from `refuse`)
 * `NestedTransactionOpenAtCommitError`), rows [].
 *
 * Suggested fix: before `refuseLeftOpen` (in `commitWith`/`commitPlain`, or the pool's own
 * override), wait for the ends called before the commit (`endsInFlight.before()`, bounded by
 * the commit's deadline), then judge what is left open; the library's COMMIT is called after
 * them and must run after them, as a statement of the handler's would.
 *
 * Fixed: the pool's `commitWith`/`commitPlain` wait (at most the deadline: `settledWithin`) for
 * the ends called before them before judging what is left open. (The test's `commits` map typed
 * `Promise<unknown>` so that it compiles.)
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body76 = { tag: string; awaitCommit?: boolean };

/** What the handler's unawaited COMMIT met, if anything. */
const met: string[] = [];
/** The handlers' unawaited COMMITs, by tag: the test awaits them before reading rows. */
const commits = new Map<string, Promise<unknown>>();

async function work(pool: Pool, { tag, awaitCommit }: Body76) {
  const client = await pool.connect();
  await client.query('BEGIN');
  await client.query(`INSERT INTO adv76puc_notes (tag, what) VALUES ($1, 'order')`, [tag]);
  const commit = client.query('COMMIT').catch((error: unknown) => {
    met.push(`${tag}: ${(error as Error).name}`);
  });
  commits.set(tag, commit);
  if (awaitCommit) await commit;
  client.release();
  return { tag };
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

describe('adversary 76: a nested COMMIT not awaited as the handler returns', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_commit_at_return', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv76puc_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);',
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const rows = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv76puc_notes WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body76) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  /** Rows once the handler's own COMMIT (not awaited by it) is over. */
  const settledRows = async (tag: string) => {
    await commits.get(tag);
    return rows(tag);
  };

  it('control: without @Idempotent(): 201, the row committed', async () => {
    const tag = 'plain-unawaited';
    const answer = await post('/plain', undefined, { tag });
    expect({ status: answer.status, rows: await settledRows(tag) }).toEqual({
      status: 201,
      rows: ['order'],
    });
  }, 30_000);

  it('control: keyed, the COMMIT awaited: 201', async () => {
    const tag = 'keyed-awaited';
    const answer = await post('/keyed', tag, { tag, awaitCommit: true });
    expect({ status: answer.status, rows: await settledRows(tag) }).toEqual({
      status: 201,
      rows: ['order'],
    });
  }, 30_000);

  it('keyed, the COMMIT not awaited: 201, the row committed with the answer', async () => {
    const tag = 'keyed-unawaited';
    const answer = await post('/keyed', tag, { tag });
    expect({
      status: answer.status,
      body: answer.status === 201 ? undefined : (answer.body as unknown),
      rows: await settledRows(tag),
      met: met.filter((line) => line.startsWith(tag)),
    }).toEqual({ status: 201, body: undefined, rows: ['order'], met: [] });
  }, 30_000);
});
