/**
 * Adversary 75b: node-postgres code that ends its transaction with a `ROLLBACK` it does not
 * await (a common idiom in a `catch`: `client.query('ROLLBACK'); client.release();`) and then
 * writes with `pool.query()` answers 500 on every try. Without the library the `ROLLBACK` runs
 * on the client's own connection and the `pool.query()` on another: 201, the write kept. Keyed,
 * the write is handed to the request's connection before the nested transaction's
 * `ROLLBACK TO`: after a caught failure it meets the still aborted transaction (25P02, the
 * handler's 500); after a rollback the code chose (no failure), it runs inside the savepoint
 * about to be rolled back to, and that rollback is refused
 * (`StatementBesideNestedTransactionError`, 500 `transaction_aborted`). Awaiting the `ROLLBACK`
 * first: 201. Checked with lib/data-layers/pool-transaction.ts of 1b86fd7^ too (before round
 * 75's pool-seam fixes): the same 500s, so not a regression of this round; the round-75
 * release fix (3fa0fd7) leaves it as it was (`release()` then waits behind the `ROLLBACK`,
 * whose nested transaction is already off the books).
 *
 *   const client = await pool.connect();
 *   try {
 *     await client.query('BEGIN');                      // a savepoint of the request's
 *     await client.query(`INSERT … 'order'`, [tag]);
 *     await client.query(`INSERT … 'refused'`, [tag]);  // 23514 (or: the code decides to undo)
 *     await client.query('COMMIT');
 *   } catch {
 *     client.query('ROLLBACK');                         // not awaited: pg runs it in call order
 *     client.release();
 *     await pool.query(`INSERT … 'failed'`, [tag]);     // another connection, without the library
 *     return { tag, failed: true };
 *   }
 *
 * Why: `PoolTransaction.endSavepoint` (lib/data-layers/pool-transaction.ts), for a rollback,
 * takes the savepoint off the books at the call (`pop()`, into `rolledBackUnsent`) but hands
 * its `ROLLBACK TO SAVEPOINT` to node-postgres only after `await savepoint.made` and the
 * awaits of `statement()` (`connection()`, `makeSavepoints`); the `pool.query()` called just
 * after goes through `statement()` with no savepoint open and fewer awaits, and reaches the
 * connection first. "A statement sent before its ROLLBACK TO is inside it, whenever it was
 * called: judged as that is sent" (the comment in `endSavepoint`): so it runs inside the
 * rolled-back nested transaction, in the aborted transaction after a failure (25P02), and
 * `markBeside` marks the savepoint `beside` otherwise (the `ROLLBACK TO`'s `beforeSend` then
 * refuses the request). node-postgres' own order is the other: the `ROLLBACK` was called first.
 *
 * Expected (docs/guides/data-layers.md): "`pool.connect()` gives a view of the request's
 * connection … a nested transaction that fails and is caught rolls back alone while the rest
 * commits with the answer"; "Statements queued on one such client without awaiting … run in
 * the order called, as node-postgres runs them"; the refusal beside is for "A statement sent
 * beside an open nested transaction" — this one is called after the nested transaction's
 * `ROLLBACK`, when, for the code, none is open.
 *
 * Control: without `@Idempotent()`: 201, the 'failed' line kept; keyed, the `ROLLBACK` awaited:
 * 201, the 'failed' line kept.
 *
 * Severity: medium (a false 500 on every try for a common node-postgres idiom; nothing lost or
 * run twice).
 *
 * Fails now: 'Expected {"status":201,"rows":["failed"],"met":[]}, Received
 * {"status":500,"rows":[],"met":["keyed-failure: 25P02"]}' and 'Expected
 * {"status":201,"rows":["failed"]}, Received {"status":500,"rows":[]}' (the undo without a
 * failure); the two controls pass.
 *
 * Suggested fix: hand a nested `ROLLBACK`'s `ROLLBACK TO SAVEPOINT` to the connection at its
 * call when its savepoint was made (synchronously, as `onRelease` does with
 * `savepointClient.query`), or hold statements called after it (beside it) until it is sent,
 * so that node-postgres receives them in call order.
 *
 * Fixed: a nested `COMMIT` or `ROLLBACK` called on a view is counted in flight from its call
 * until its text is handed to node-postgres (`EndsInFlight`, lib/data-layers/ends-in-flight.ts;
 * registered in `JoinedClient.query`, told in `PoolTransaction.statement`'s `onSent`); a
 * statement called after it through another view or `pool.query()` waits for it in
 * `PoolTransaction.statement` (`CallOrder.after`) and is judged and sent after its
 * `ROLLBACK TO`: outside the rolled-back nested transaction, in call order as node-postgres.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body75 = { tag: string; awaitRollback?: boolean; undo?: boolean };

/** What the handler met, by the error's code. */
const met: string[] = [];

const insert = (what: string) => `INSERT INTO adv75bu_notes (tag, what) VALUES ($1, '${what}')`;

async function work(pool: Pool, { tag, awaitRollback, undo }: Body75) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(insert('order'), [tag]);
    if (undo) throw new Error('the order is not to be kept');
    await client.query(insert('refused'), [tag]); // the check refuses it: 23514
    await client.query('COMMIT');
  } catch {
    if (awaitRollback) await client.query('ROLLBACK');
    else void client.query('ROLLBACK');
    client.release();
    try {
      await pool.query(insert('failed'), [tag]);
    } catch (error) {
      met.push(`${tag}: ${(error as { code?: string }).code ?? (error as Error).name}`);
      throw error;
    }
    return { tag, failed: true };
  }
  client.release();
  return { tag, failed: false };
}

@Controller()
class NotesController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75) {
    return work(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: Body75) {
    return work(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class NotesModule {}

describe('adversary 75b: a ROLLBACK not awaited, then a write through the pool', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75b_unawaited_rollback', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv75bu_notes (
            id serial PRIMARY KEY,
            tag text NOT NULL,
            what text NOT NULL CHECK (what <> 'refused'));`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const rows = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv75bu_notes WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body75) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the write after the ROLLBACK is kept: 201', async () => {
    const tag = 'plain-failure';
    const answer = await post('/plain', undefined, { tag });
    expect({ status: answer.status, rows: await rows(tag) }).toEqual({
      status: 201,
      rows: ['failed'],
    });
  }, 20_000);

  it('control: keyed, the ROLLBACK awaited: 201', async () => {
    const tag = 'keyed-awaited';
    const answer = await post('/keyed', tag, { tag, awaitRollback: true });
    expect({ status: answer.status, rows: await rows(tag) }).toEqual({
      status: 201,
      rows: ['failed'],
    });
  }, 20_000);

  it('keyed, after a caught failure, the ROLLBACK not awaited: 201', async () => {
    const tag = 'keyed-failure';
    const answer = await post('/keyed', tag, { tag });
    // Received: 500; the write met the transaction still aborted (25P02).
    expect({
      status: answer.status,
      rows: await rows(tag),
      met: met.filter((line) => line.startsWith(tag)),
    }).toEqual({ status: 201, rows: ['failed'], met: [] });
  }, 20_000);

  it('keyed, the code undoes its order, the ROLLBACK not awaited: 201', async () => {
    const tag = 'keyed-undo';
    const answer = await post('/keyed', tag, { tag, undo: true });
    // Received: 500 transaction_aborted (the rollback refused: the write was inside it).
    expect({ status: answer.status, rows: await rows(tag) }).toEqual({
      status: 201,
      rows: ['failed'],
    });
  }, 20_000);
});
