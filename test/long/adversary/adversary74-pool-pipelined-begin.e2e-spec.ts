/**
 * Adversary 74: pg runs a client's queries in the order they were called, so a `BEGIN` need
 * not be awaited before the next query is queued (`Promise.all([client.query('BEGIN'),
 * client.query('INSERT …')])`, one round trip saved). Inside an idempotent request the
 * statements queued right behind such a `BEGIN` are judged BEFORE its nested transaction
 * exists: they run outside it, at the request's top level. So:
 *
 *   - the app's `ROLLBACK` after them finds a nested transaction in which nothing ran, and
 *     rolls back nothing: the order the app rolled back (out of stock) commits with a stored
 *     201 `{ placed: false }` (high: a wrong effect committed, replayed to every retry);
 *   - a whole transaction queued at once (`BEGIN`, the tenant's `set_config(…, true)`, the
 *     `INSERT`, `COMMIT` under one `Promise.all`) has its `COMMIT` refused ("COMMIT refused:
 *     the idempotent request's transaction commits with its stored response…"): 500, nothing
 *     kept, on every try, for code that is correct pg (medium: a false refusal);
 *   - with `BEGIN` awaited and only the rest queued (`set_config`, `INSERT`, `COMMIT`), the
 *     `COMMIT`, called in the same tick, finds the savepoint not made yet ("nothing ran
 *     inside it") and ends it; the `set_config(…, true)` and the `INSERT` then run at the
 *     request's top level, and the tenant outlives the nested transaction: the request's own
 *     row written after it is stamped 'acme' under the stored 201 (high: a wrong effect).
 *
 *   const client = await pool.connect();
 *   const [, placed] = await Promise.all([
 *     client.query('BEGIN'),                                  // a savepoint of the request's
 *     client.query('INSERT INTO orders (tag) VALUES ($1) RETURNING id', [tag]),
 *   ]);
 *   const stock = await client.query('SELECT count FROM stock …');
 *   if (stock.rows[0].count < 1) { await client.query('ROLLBACK'); return { placed: false }; }
 *
 * Why: `PoolTransaction.onView` (lib/data-layers/pool-transaction.ts), for a `begin`, first
 * `await this.askIsolation(control.level)` — an async call that yields even when there is no
 * level (`if (level === undefined) return;` inside an async function) — and only then pushes
 * the savepoint on `this.savepoints` and `view.savepoints`. A statement the handler queues on
 * the same client in the same tick is judged at once by `statement()` with `view.savepoints`
 * still empty: `open` is `[]`, `outside` is true, nothing is noted inside, and it is sent at
 * the top level, never inside the savepoint. The `ROLLBACK` then meets a savepoint that was
 * never `made` (`endSavepoint`: "nothing ran inside it") and sends nothing; a `COMMIT` called
 * in the same tick meets no savepoint at all (`innermost` → `refuse('COMMIT')`). Likewise
 * `endSavepoint` decides "nothing ran inside it" (`if (!savepoint.made) return pop()`) when
 * the COMMIT is CALLED, while a statement called before it on the same view has not yet made
 * the savepoint (it does so after `await this.connection()`): that statement then finds the
 * savepoint gone and runs at the top level.
 *
 * Expected (docs/guides/data-layers.md): "`pool.connect()` gives a view of the request's
 * connection. A data layer opens its own transactions on such a connection with `BEGIN`;
 * there, `BEGIN` … is a savepoint, `COMMIT` releases it and `ROLLBACK` rolls back to it … a
 * nested transaction that fails … rolls back alone while the rest commits with the answer";
 * and the seam's promise: a statement is judged "as it is sent (the order the connection
 * runs them in)". pg's order is the call order.
 *
 * Control: the same code with each `BEGIN` awaited first: the order rolled back (201 `{
 * placed: false }`, no row), the queued-at-once transaction committed (201, the row with its
 * tenant); without `@Idempotent()`: the same two outcomes.
 *
 * Fails now: the queued order: 'Expected orders 0, Received 1' (201 `{ placed: false }` stored,
 * the order committed); the queued transaction: 'Expected status 201, notes ["acme"];
 * Received 500, []'; the rest queued behind an awaited BEGIN: 'Expected after [""], Received
 * ["acme"]' (the four controls pass).
 *
 * Suggested fix: push the nested transaction's savepoint synchronously when its `BEGIN` is
 * called (and pop it if `askIsolation` refuses), so that what is called after it on the same
 * view is inside it, as pg would run it; or have each view queue its own calls (in call
 * order) so that each is judged only once the one before it was.
 *
 * Fixed: a view's calls are judged one after another in call order, each once the one before it
 * is done (`JoinedClient.turn`), as node-postgres runs them: the INSERT queued behind BEGIN is
 * inside its savepoint.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body74 = { tag: string; awaited?: boolean; beginAwaited?: boolean };

/** The order, rolled back by the app: the stock is empty. */
async function order(pool: Pool, { tag, awaited }: Body74) {
  const client = await pool.connect();
  try {
    const insert = () =>
      client.query<{ id: number }>('INSERT INTO adv74p_orders (tag) VALUES ($1) RETURNING id', [
        tag,
      ]);
    if (awaited) {
      await client.query('BEGIN');
      await insert();
    } else {
      // pg queues a client's queries and runs them in call order: one round trip saved.
      await Promise.all([client.query('BEGIN'), insert()]);
    }
    const stock = await client.query<{ left: number }>(
      'SELECT left_count AS left FROM adv74p_stock',
    );
    if (stock.rows[0].left < 1) {
      await client.query('ROLLBACK');
      return { tag, placed: false };
    }
    await client.query('COMMIT');
    return { tag, placed: true };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/** A whole transaction queued at once: the tenant set for it, the note written under it. */
async function note(pool: Pool, { tag, awaited, beginAwaited }: Body74) {
  const client = await pool.connect();
  try {
    const steps: [string, unknown[]?][] = [
      ['BEGIN'],
      ["SELECT set_config('app.tenant', $1, true)", ['acme']],
      ['INSERT INTO adv74p_notes (tag) VALUES ($1)', [tag]],
      ['COMMIT'],
    ];
    if (awaited) for (const [text, values] of steps) await client.query(text, values);
    else if (beginAwaited) {
      // BEGIN first; its statements and COMMIT queued at once.
      await client.query('BEGIN');
      await Promise.all(steps.slice(1).map(([text, values]) => client.query(text, values)));
    } else await Promise.all(steps.map(([text, values]) => client.query(text, values)));
  } finally {
    client.release();
  }
  // The request's own bookkeeping after the tenant's transaction: no tenant set for it.
  await pool.query('INSERT INTO adv74p_notes (tag) VALUES ($1)', [`${tag}-after`]);
  return { tag };
}

@Controller()
class ShopController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed/order')
  @Idempotent()
  keyedOrder(@Body() body: Body74) {
    return order(this.pool, body);
  }

  @Post('plain/order')
  plainOrder(@Body() body: Body74) {
    return order(this.pool, body);
  }

  @Post('keyed/note')
  @Idempotent()
  keyedNote(@Body() body: Body74) {
    return note(this.pool, body);
  }

  @Post('plain/note')
  plainNote(@Body() body: Body74) {
    return note(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ShopController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class ShopModule {}

describe('adversary 74: statements queued behind an unawaited BEGIN on a client of the pool', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv74_pipelined_begin', {
      module: ShopModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv74p_orders (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE adv74p_stock (left_count int NOT NULL);
          INSERT INTO adv74p_stock VALUES (0);
          CREATE TABLE adv74p_notes (
            id serial PRIMARY KEY,
            tag text NOT NULL,
            tenant text NOT NULL DEFAULT coalesce(current_setting('app.tenant', true), ''));`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const orders = async (tag: string) =>
    Number(
      (
        await fixture.admin.query<{ n: string }>(
          'SELECT count(*) AS n FROM adv74p_orders WHERE tag = $1',
          [tag],
        )
      ).rows[0].n,
    );

  const notes = async (tag: string) =>
    (
      await fixture.admin.query<{ tenant: string }>(
        'SELECT tenant FROM adv74p_notes WHERE tag = $1',
        [tag],
      )
    ).rows.map((row) => row.tenant);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the queued order is rolled back by the app', async () => {
    const answer = await post('/plain/order', undefined, { tag: 'plain-order' });
    expect({ status: answer.status, placed: answer.body.placed }).toEqual({
      status: 201,
      placed: false,
    });
    expect(await orders('plain-order')).toBe(0);
  }, 20_000);

  it('control: BEGIN awaited first, the order is rolled back with its savepoint', async () => {
    const answer = await post('/keyed/order', 'awaited-order', {
      tag: 'awaited-order',
      awaited: true,
    });
    expect({ status: answer.status, placed: answer.body.placed }).toEqual({
      status: 201,
      placed: false,
    });
    expect(await orders('awaited-order')).toBe(0);
  }, 20_000);

  it('the INSERT queued behind BEGIN: the ROLLBACK takes it back, no order under the 201', async () => {
    const tag = 'queued-order';
    const answer = await post('/keyed/order', tag, { tag });
    // Received: 201 { placed: false } stored, and the order row committed (1).
    expect({
      status: answer.status,
      placed: answer.body.placed,
      orders: await orders(tag),
    }).toEqual({ status: 201, placed: false, orders: 0 });
  }, 20_000);

  it('control: without @Idempotent(), the transaction queued at once commits', async () => {
    const answer = await post('/plain/note', undefined, { tag: 'plain-note' });
    expect(answer.status).toBe(201);
    expect(await notes('plain-note')).toEqual(['acme']);
    expect(await notes('plain-note-after')).toEqual(['']);
  }, 20_000);

  it('control: each statement awaited, the note commits with its tenant', async () => {
    const answer = await post('/keyed/note', 'awaited-note', {
      tag: 'awaited-note',
      awaited: true,
    });
    expect(answer.status).toBe(201);
    expect(await notes('awaited-note')).toEqual(['acme']);
    expect(await notes('awaited-note-after')).toEqual(['']);
  }, 20_000);

  it('BEGIN awaited, the rest queued: the tenant ends with the nested COMMIT, not after it', async () => {
    const tag = 'queued-commit';
    const answer = await post('/keyed/note', tag, { tag, beginAwaited: true });
    // Received: the bookkeeping row after the nested transaction stamped 'acme': the
    // set_config ran at the request's top level (the COMMIT, called in the same tick, found
    // a savepoint not made yet and ended "nothing").
    expect({
      status: answer.status,
      note: await notes(tag),
      after: await notes(`${tag}-after`),
    }).toEqual({ status: 201, note: ['acme'], after: [''] });
  }, 20_000);

  it('a transaction queued at once: its COMMIT is not refused, 201 with the note', async () => {
    const tag = 'queued-note';
    const answer = await post('/keyed/note', tag, { tag });
    // Received: 500 (the COMMIT refused as if sent with no BEGIN), nothing kept.
    expect({ status: answer.status, notes: await notes(tag) }).toEqual({
      status: 201,
      notes: ['acme'],
    });
  }, 20_000);
});
