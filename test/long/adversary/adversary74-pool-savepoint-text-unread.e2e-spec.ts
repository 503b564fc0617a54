/**
 * Adversary 74: pg's own savepoint inside its transaction, written as pg users write SQL (a
 * comment before it, or two statements in one text), is not seen as a savepoint: a statement
 * sent beside it through the pool (the event log's `pool.query`) runs inside it on the
 * request's one connection, the `ROLLBACK TO` takes it along, and the request commits a 201
 * without it. Written plainly (`SAVEPOINT coupon` alone), the same program is refused as the
 * docs promise (500, nothing kept); without the library, the event commits on its own.
 *
 *   const client = await pool.connect();
 *   await client.query('BEGIN');                      // a savepoint of the request's
 *   await client.query('INSERT INTO orders …');
 *   await client.query(`-- the coupon is optional: keep the order if it fails
 *     SAVEPOINT coupon`);
 *   await pool.query('INSERT INTO events …');         // the event log, on the pool
 *   try { await client.query('INSERT INTO coupons …'); }   // taken: 23505
 *   catch { await client.query('ROLLBACK TO SAVEPOINT coupon'); }
 *   await client.query('COMMIT');
 *
 * Variants, each of which loses the event under a stored 201:
 *   - a comment before `SAVEPOINT coupon` (a leading `--` line or a block comment);
 *   - `SAVEPOINT coupon; INSERT INTO coupons …` in one text (the coupon's own write with it);
 *   - a comment before `ROLLBACK TO SAVEPOINT coupon`;
 *   - `ROLLBACK TO SAVEPOINT coupon; RELEASE SAVEPOINT coupon` in one text (the library's own
 *     idiom for a nested rollback, see `onRelease`).
 *
 * Why: `savepointControlOf` (lib/transaction/sql/sql-text.ts) answers only for a text that
 * BEGINS with `savepoint|release|rollback` (`/^\s*(savepoint|release|rollback)\b/i`) and
 * parses to exactly ONE statement; anything else is undefined, and `PoolTransaction.noteSent`
 * (lib/data-layers/pool-transaction.ts) then takes it for an ordinary write: a `SAVEPOINT`
 * so written is never pushed on `this.inner`, so `markBeside` marks nothing for it and the
 * `ROLLBACK TO` finds no savepoint to judge (`at < 0`); a `ROLLBACK TO` so written is never
 * judged against the tracked savepoint (whose `beside` is set), so nothing is refused. The
 * same module's `nestedControlOf` reads `BEGIN`/`COMMIT` after a leading comment on purpose
 * ("a tracing tool's, sqlcommenter's"); `transactionControlOf` and `rollsBackToSavepoint`
 * read every statement of a text.
 *
 * Expected (docs/guides/data-layers.md): "A statement sent beside an open nested transaction
 * (through `pool.query()` …) runs inside it … The same for a savepoint the data layer makes
 * inside it (… Kysely's `savepoint()` …) rolled back with such a statement in it": refused
 * with `StatementBesideNestedTransactionError`, the whole request rolls back. And
 * (docs/guides/transactions.md): "a keyword in a string, a comment or a quoted name is never
 * taken for one" — nor should a comment hide one.
 *
 * Control: the same program with `SAVEPOINT coupon` and `ROLLBACK TO SAVEPOINT coupon` each
 * alone in its text: 500, nothing kept (the documented refusal); without `@Idempotent()`:
 * 201, the order and the event kept.
 *
 * Severity: high (an effect lost under a stored 201: the retry replays the 201, the event is
 * never written).
 *
 * Fails now: each of the five variants, 'Expected value: {"kept": ["order"], "status": 201}'
 * (the event rolled back with the savepoint under a stored 201); the two controls pass.
 *
 * Suggested fix: read every statement of the text in `noteSent` (`statementsOf`), a leading
 * comment allowed, and apply each savepoint control in its order (a write among them marks as
 * a write); or refuse, before it is sent, a text that holds a savepoint control and anything
 * else, or one the reader cannot place.
 *
 * Fixed: every statement of a text is read, a comment first allowed (`savepointControlsOf`), and
 * each savepoint control applied in its order (`noteSent`, `noteSavepointControl`).
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Variant =
  'plain' | 'comment' | 'block-comment' | 'multi' | 'rollback-comment' | 'rollback-release';
type Body74 = { tag: string; variant: Variant };

const COUPON = 'INSERT INTO adv74t_coupons (code) VALUES ($1)';

async function work(pool: Pool, { tag, variant }: Body74) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('INSERT INTO adv74t_rows (tag, what) VALUES ($1, $2)', [tag, 'order']);
    const savepoint =
      variant === 'comment'
        ? `-- the coupon is optional: keep the order if it fails
           SAVEPOINT coupon`
        : variant === 'block-comment'
          ? '/* optional coupon */ SAVEPOINT coupon'
          : 'SAVEPOINT coupon';
    try {
      if (variant === 'multi') {
        // The savepoint and the pre-check of the coupon in one round trip.
        await client.query("SAVEPOINT coupon; SELECT 1 FROM adv74t_coupons WHERE code = 'c1'");
      } else {
        await client.query(savepoint);
      }
      // The event log, on the pool: without the library a connection of its own, committed.
      await pool.query('INSERT INTO adv74t_rows (tag, what) VALUES ($1, $2)', [tag, 'event']);
      await client.query(COUPON, ['c1']); // already taken: 23505
    } catch {
      const rollback =
        variant === 'rollback-comment'
          ? '/* coupon taken */ ROLLBACK TO SAVEPOINT coupon'
          : variant === 'rollback-release'
            ? 'ROLLBACK TO SAVEPOINT coupon; RELEASE SAVEPOINT coupon'
            : 'ROLLBACK TO SAVEPOINT coupon';
      await client.query(rollback);
    }
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
  return { tag };
}

@Controller()
class OrdersController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return work(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return work(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class OrdersModule {}

describe('adversary 74: a savepoint written with a comment or beside another statement is not seen', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv74_savepoint_text', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv74t_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);
          CREATE TABLE adv74t_coupons (code text PRIMARY KEY);
          INSERT INTO adv74t_coupons VALUES ('c1');`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv74t_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the event commits on its own, the order too: 201', async () => {
    const tag = 'no-library';
    const answer = await post('/plain', undefined, { tag, variant: 'comment' });
    expect(answer.status).toBe(201);
    expect(await kept(tag)).toEqual(['event', 'order']);
  }, 20_000);

  it('control: SAVEPOINT and ROLLBACK TO each alone: refused as documented, 500, nothing kept', async () => {
    const tag = 'plain-text';
    const answer = await post('/keyed', tag, { tag, variant: 'plain' });
    expect(answer.status).toBe(500);
    expect(await kept(tag)).toEqual([]);
  }, 20_000);

  it.each<Variant>(['comment', 'block-comment', 'multi', 'rollback-comment', 'rollback-release'])(
    '%s: never a 201 without the event (refused, or the event kept)',
    async (variant) => {
      const tag = `v-${variant}`;
      const answer = await post('/keyed', tag, { tag, variant });
      const outcome = { status: answer.status, kept: await kept(tag) };
      // Received: { status: 201, kept: ['order'] }: the event rolled back with the savepoint.
      expect([
        { status: 500, kept: [] },
        { status: 201, kept: ['event', 'order'] },
      ]).toContainEqual(outcome);
    },
    20_000,
  );
});
