/**
 * Adversary 75: a transaction helper that RETURNS its `COMMIT` without awaiting it, inside a
 * `try … finally { client.release() }` (the classic `return` in `try` of an async function:
 * the `finally` runs before the returned promise settles). node-postgres has already queued
 * the `COMMIT` on the connection when `release()` is called, so without the library the
 * transaction commits: 201, the row kept. Inside an idempotent request, `release()` rolls the
 * nested transaction back at once (its `COMMIT` has not been judged yet), the `COMMIT` then
 * sends a `RELEASE SAVEPOINT` for a savepoint that no longer exists (3B001), and the request
 * answers 500, nothing kept, on every try.
 *
 *   async function inTransaction(pool: Pool, work: (client: PoolClient) => Promise<void>) {
 *     const client = await pool.connect();
 *     try {
 *       await client.query('BEGIN');
 *       await work(client);
 *       return client.query('COMMIT');          // returned: `finally` runs before it settles
 *     } catch (error) {
 *       await client.query('ROLLBACK');
 *       throw error;
 *     } finally {
 *       client.release();                       // node-postgres has the COMMIT queued already
 *     }
 *   }
 *
 * Why: `JoinedClient.release` (lib/data-layers/pool-transaction.ts) calls
 * `PoolTransaction.onRelease` synchronously, outside the view's `turn`: round 74 made a
 * view's calls run one after another in call order (`JoinedClient.turn`/`pending`/`inTurn`),
 * as node-postgres queues them, but not `release()`. The `COMMIT` called just before is in
 * `endSavepoint`, awaiting `savepoint.made` (it yields even when that is settled): the
 * savepoint is still on `view.savepoints`, so `onRelease` pops it and sends `ROLLBACK TO
 * SAVEPOINT …; RELEASE SAVEPOINT …`; then `endSavepoint` goes on and sends `RELEASE SAVEPOINT`
 * of the same name: PostgreSQL answers 3B001, which aborts the request's transaction.
 *
 * Expected (docs/guides/data-layers.md): "Statements queued on one such client without
 * awaiting (…) run in the order called, as node-postgres runs them"; "`COMMIT` releases it
 * [the savepoint]"; "A connection given back with its nested transaction still open rolls
 * that transaction back at once": here the transaction's `COMMIT` was called before the
 * connection was given back, as node-postgres sees it. So: 201, the row kept, as without the
 * library.
 *
 * Control: without `@Idempotent()`: 201, the row kept; keyed, the same helper with `return
 * await client.query('COMMIT')`: 201, the row kept.
 *
 * Severity: medium (a false refusal: working pg code answers 500 on every try, nothing kept;
 * nothing lost under a success).
 *
 * Fails now: 'Expected {"status":201,"rows":["order","after"]}, Received {"status":500,
 * "rows":[]}'; the two controls pass.
 *
 * Suggested fix: make `release()` take its turn as a call does: with calls pending, run
 * `onRelease` once the view's `turn` is done (then the `COMMIT` has ended the nested
 * transaction and nothing is left to roll back); with none pending, at once as now.
 *
 * Fixed: `JoinedClient.release` (lib/data-layers/pool-transaction.ts) takes its turn among the
 * view's calls (`turn`/`pending`/`inTurn`), as node-postgres runs a client's queries in call
 * order: with calls pending, `onRelease` runs once they are done (the `COMMIT` has then ended
 * the nested transaction, and nothing is left to roll back); with none, at once as before.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool, type PoolClient } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body75 = { tag: string; awaitCommit?: boolean };

const insert = (what: string) => `INSERT INTO adv75q_notes (tag, what) VALUES ($1, '${what}')`;

/** The app's transaction helper. */
async function inTransaction(
  pool: Pool,
  awaitCommit: boolean | undefined,
  work: (client: PoolClient) => Promise<void>,
) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await work(client);
    if (awaitCommit) return await client.query('COMMIT');
    return client.query('COMMIT'); // returned: `finally` runs before it settles
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release(); // node-postgres has the COMMIT queued already
  }
}

async function order(pool: Pool, { tag, awaitCommit }: Body75) {
  await inTransaction(pool, awaitCommit, async (client) => {
    await client.query(insert('order'), [tag]);
  });
  await pool.query(insert('after'), [tag]);
  return { tag };
}

@Controller()
class OrdersController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75) {
    return order(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: Body75) {
    return order(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class OrdersModule {}

describe('adversary 75: release() called while the COMMIT is queued on a client of the pool', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75_release_queued_commit', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75q_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv75q_notes WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body75) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the returned COMMIT commits: 201, the row kept', async () => {
    const tag = 'plain';
    const answer = await post('/plain', undefined, { tag });
    expect({ status: answer.status, rows: await rows(tag) }).toEqual({
      status: 201,
      rows: ['order', 'after'],
    });
  }, 20_000);

  it('control: keyed, the COMMIT awaited before release(): 201, the row kept', async () => {
    const tag = 'keyed-awaited';
    const answer = await post('/keyed', tag, { tag, awaitCommit: true });
    expect({ status: answer.status, rows: await rows(tag) }).toEqual({
      status: 201,
      rows: ['order', 'after'],
    });
  }, 20_000);

  it('keyed, the COMMIT returned and release() in finally: 201, the row kept', async () => {
    const tag = 'keyed-returned';
    const answer = await post('/keyed', tag, { tag });
    // Received: 500, nothing kept (release() rolled the savepoint back, the COMMIT's RELEASE
    // SAVEPOINT then met 3B001).
    expect({ status: answer.status, rows: await rows(tag) }).toEqual({
      status: 201,
      rows: ['order', 'after'],
    });
  }, 20_000);
});
