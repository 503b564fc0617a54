/**
 * Adversary 75d: node-postgres code whose transaction's `COMMIT` fails on a deferred foreign
 * key (an order line whose order does not exist), a `COMMIT` it does not await but catches
 * (`.catch(log)`), then writes its audit row through `pool.query()`, answers 500 on every try:
 * the audit `INSERT` is sent right behind the failing `COMMIT` on the request's connection,
 * inside the nested transaction that `COMMIT` failed to end, and fails there with 25P02
 * ("current transaction is aborted"). Without the library: 201, the line rejected, the audit
 * row committed (its own connection). Keyed with the `COMMIT` awaited (and caught): 201, the
 * same rows.
 *
 *   const client = await pool.connect();
 *   await client.query('BEGIN');                                 // a savepoint of the request's
 *   await client.query(`INSERT INTO lines (order_id, …) VALUES (404, …)`); // FK DEFERRABLE INITIALLY DEFERRED
 *   client.query('COMMIT').catch(() => log('line rejected'));    // not awaited: pg runs it in order
 *   client.release();
 *   await pool.query(`INSERT INTO audit …`, [tag]);              // called after the COMMIT
 *   return { tag };
 *
 * Why: round 75b's fix (EndsInFlight, lib/data-layers/ends-in-flight.ts) holds a statement
 * called after an unawaited end only until that end is *handed* to node-postgres (`onSent` in
 * `PoolTransaction.statement`), then judges it as after it (`refuseBesideIdentity` and
 * `markBeside` skip a savepoint whose `endSent` is set) and sends it. But a nested `COMMIT` can
 * fail (its deferred check, `deferredCheck` in `endSavepoint`): then its nested transaction is
 * still open, and aborted, and what was sent behind it runs inside it: the audit `INSERT`
 * meets 25P02. `endSavepoint` clears `endSent` only once the failure is back, after the held
 * statement was judged and sent. Without the library that statement runs on a connection of
 * its own, untouched by the failed `COMMIT` (in PostgreSQL a failed `COMMIT` ends its
 * transaction anyway); with the `COMMIT` awaited, the client's `release()` rolls the nested
 * transaction back first (`onRelease`), and the audit row is kept.
 *
 * Expected (docs/guides/data-layers.md, round 75b): "And what is called after a nested
 * transaction's `COMMIT` or `ROLLBACK` that is not awaited (…), through any other client of the
 * pool or `pool.query()`, runs after it, and is judged as after it: not inside the transaction
 * its code had ended, nor beside it"; "A failed statement that the handler catches and goes on
 * from aborts the transaction in PostgreSQL (…). Inside a nested transaction that rolls back,
 * it is only that savepoint's."
 *
 * Control: without `@Idempotent()`: 201, the audit row, no line; keyed, the `COMMIT` awaited:
 * 201, the same.
 *
 * Severity: medium (a false 500 on every try for node-postgres code that is correct without the
 * library; nothing lost or run twice).
 *
 * Checked with lib/data-layers/pool-transaction.ts of 93ca226^: the same 500: not a
 * regression, a case round 75b's fix still misses.
 *
 * Fails now: 'Expected {"status":201,"lines":0,"audit":1,"met":["keyed-unawaited: commit
 * 23503"]}, Received {"status":500,"lines":0,"audit":0,"met":["keyed-unawaited: commit 23503",
 * "keyed-unawaited: audit 25P02"]}'; the two controls pass.
 *
 * Suggested fix: a statement held behind a nested `COMMIT` that may fail (one with a deferred
 * check, or any) waits until that `COMMIT` is done, not only handed over: if it failed, its
 * savepoint is rolled back first (as `release()` would) or the statement is judged as inside
 * the still-open nested transaction; or hold it behind the `COMMIT`'s outcome only when that
 * `COMMIT` carries a deferred check.
 *
 * Fixed: what is called after a nested `COMMIT` waits until that `COMMIT` is done, not only
 * handed over (`JoinedClient.query`: `endCalled(done)`; a `ROLLBACK` still until handed over),
 * and a `release()` called behind pending calls is an end too (`JoinedClient.release`:
 * `endCalled(released)`): the audit write is judged and sent after the failed `COMMIT` and the
 * release's `ROLLBACK TO`, outside the savepoint (lib/data-layers/pool-transaction.ts,
 * lib/data-layers/ends-in-flight.ts).
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body75 = { tag: string; awaitCommit?: boolean };

/** What the handler met: the COMMIT's failure (caught), the audit write's. */
const met: string[] = [];

const codeOf = (error: unknown) => (error as { code?: string }).code ?? (error as Error).name;

async function work(pool: Pool, { tag, awaitCommit }: Body75) {
  const client = await pool.connect();
  await client.query('BEGIN');
  await client.query('INSERT INTO adv75dfc_lines (tag, order_id) VALUES ($1, 404)', [tag]);
  const commit = client.query('COMMIT').catch((error: unknown) => {
    met.push(`${tag}: commit ${codeOf(error)}`);
  });
  if (awaitCommit) await commit;
  client.release();
  try {
    await pool.query('INSERT INTO adv75dfc_audit (tag) VALUES ($1)', [tag]);
  } catch (error) {
    met.push(`${tag}: audit ${codeOf(error)}`);
    throw error;
  }
  await commit;
  return { tag };
}

@Controller()
class LinesController {
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
  controllers: [LinesController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class LinesModule {}

describe('adversary 75d: a nested COMMIT not awaited fails, a write through the pool after it', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75d_failed_commit', {
      module: LinesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv75dfc_orders (id int PRIMARY KEY);
          CREATE TABLE adv75dfc_lines (
            id serial PRIMARY KEY,
            tag text NOT NULL,
            order_id int NOT NULL REFERENCES adv75dfc_orders (id) DEFERRABLE INITIALLY DEFERRED);
          CREATE TABLE adv75dfc_audit (id serial PRIMARY KEY, tag text NOT NULL);`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const state = async (tag: string) => ({
    lines: Number(
      (
        await fixture.admin.query<{ n: string }>(
          'SELECT count(*) AS n FROM adv75dfc_lines WHERE tag = $1',
          [tag],
        )
      ).rows[0].n,
    ),
    audit: Number(
      (
        await fixture.admin.query<{ n: string }>(
          'SELECT count(*) AS n FROM adv75dfc_audit WHERE tag = $1',
          [tag],
        )
      ).rows[0].n,
    ),
  });

  const post = (path: string, key: string | undefined, body: Body75) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the line rejected, the audit kept: 201', async () => {
    const tag = 'plain-unawaited';
    const answer = await post('/plain', undefined, { tag });
    expect({
      status: answer.status,
      ...(await state(tag)),
      met: met.filter((line) => line.startsWith(`${tag}:`)),
    }).toEqual({ status: 201, lines: 0, audit: 1, met: [`${tag}: commit 23503`] });
  }, 20_000);

  it('control: keyed, the COMMIT awaited: 201, the same', async () => {
    const tag = 'keyed-awaited';
    const answer = await post('/keyed', tag, { tag, awaitCommit: true });
    expect({
      status: answer.status,
      ...(await state(tag)),
      met: met.filter((line) => line.startsWith(`${tag}:`)),
    }).toEqual({ status: 201, lines: 0, audit: 1, met: [`${tag}: commit 23503`] });
  }, 20_000);

  it('keyed, the COMMIT not awaited: 201, the line rejected, the audit kept', async () => {
    const tag = 'keyed-unawaited';
    const answer = await post('/keyed', tag, { tag });
    expect({
      status: answer.status,
      ...(await state(tag)),
      met: met.filter((line) => line.startsWith(`${tag}:`)),
    }).toEqual({ status: 201, lines: 0, audit: 1, met: [`${tag}: commit 23503`] });
  }, 20_000);
});
