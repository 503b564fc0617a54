/**
 * Adversary 76: node-postgres code that ends a transaction on one client with a `COMMIT` (or a
 * `ROLLBACK`) it does not await, gives that client back, and then reads a pg-query-stream on
 * another client of the pool, answers 500 `cursor_open`, nothing stored, on every try. Without
 * the library: 201, the row committed. Keyed, the end awaited: 201, the same row.
 *
 *   const first = await pool.connect();
 *   await first.query('BEGIN');                         // a savepoint of the request's
 *   first.query(`INSERT … 'order'`, [tag]);             // queued, as node-postgres runs them
 *   const ended = first.query('COMMIT');                // not awaited (or 'ROLLBACK')
 *   first.release();
 *   const second = await pool.connect();
 *   for await (const row of second.query(new QueryStream('SELECT n FROM … ORDER BY n'))) read.push(row.n);
 *   second.release();
 *   await ended;
 *   return { tag, read };
 *
 * Why: round 75b's `EndsInFlight` holds a statement called after an unawaited end until that
 * end is handed to node-postgres (`PoolTransaction.statement`, `order.after` taken at the call
 * in `JoinedClient.query`), and round 75d did the same for a view's `BEGIN`. A submittable is
 * not held: `JoinedClient.query`'s `isSubmittable` branch calls `PoolTransaction.submit` at
 * once, which never looks at `endsBefore()`. The stream is therefore submitted ahead of the
 * first client's `COMMIT` (which waits behind its `INSERT` in the view's turn), inside its
 * nested transaction, and counted in `openCursors` (`watchCursor`). When the `COMMIT` then comes
 * to be sent, `statement` → `refuseBehindCursor()` finds the stream open and refuses the
 * request with `CursorOpenRefusedError`: the end its code called first is refused because of
 * a stream its code opened after it. The `ROLLBACK` variant is refused the same way.
 *
 * Expected (docs/guides/data-layers.md): "And what is called after a nested transaction's
 * `COMMIT` or `ROLLBACK` that is not awaited (…), through any other client of the pool or
 * `pool.query()`, runs after it, and is judged as after it: not inside the transaction its code
 * had ended, nor beside it." and "Statements queued on one such client without awaiting (…)
 * run in the order called, as node-postgres runs them". The stream is neither run after the
 * end nor judged after it.
 *
 * Control: without `@Idempotent()`: 201, the row kept; keyed with the end awaited: 201.
 *
 * Severity: medium (a false 500 `cursor_open` on every try for node-postgres code that is
 * correct without the library; nothing committed twice, nothing held).
 *
 * Fails now: keyed with the COMMIT (and the ROLLBACK) not awaited: 500
 * `{"code":"cursor_open",…}` instead of 201; the controls pass.
 *
 * Suggested fix: in `JoinedClient.query`'s submittable branch take `endsBefore()` at the call
 * and have `PoolTransaction.submit` wait for those ends (as `statement` does with
 * `order.after`) before `refuseBehindCursor`, `watchCursor` and the savepoints open at the
 * time are read; the stream stays `held` meanwhile (a `close()` then withdraws it).
 *
 * Fixed: a submittable takes the ends called before it at its call (`JoinedClient.query`) and
 * `PoolTransaction.submit` holds it (closable meanwhile) until they are handed over, then
 * judges it (lib/data-layers/pool-transaction.ts).
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import QueryStream from 'pg-query-stream';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body76 = { tag: string; end: 'COMMIT' | 'ROLLBACK'; awaitEnd?: boolean };

async function work(pool: Pool, { tag, end, awaitEnd }: Body76) {
  const first = await pool.connect();
  await first.query('BEGIN');
  const inserted = first.query(`INSERT INTO adv76psa_notes (tag, what) VALUES ($1, 'order')`, [
    tag,
  ]);
  const ended = first.query(end);
  // Observed: its outcome is awaited below, with the insert's.
  const outcome = Promise.all([inserted, ended]);
  outcome.catch(() => undefined);
  if (awaitEnd) await outcome;
  first.release();
  const second = await pool.connect();
  const read: number[] = [];
  try {
    const stream = second.query(
      new QueryStream('SELECT n FROM adv76psa_numbers ORDER BY n', [], { batchSize: 2 }),
    );
    for await (const row of stream as AsyncIterable<{ n: number }>) read.push(row.n);
  } finally {
    second.release();
  }
  await outcome;
  return { tag, read };
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

describe('adversary 76: a stream read after a COMMIT or ROLLBACK not awaited on another client', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_stream_after_end', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv76psa_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);
          CREATE TABLE adv76psa_numbers (n int PRIMARY KEY);
          INSERT INTO adv76psa_numbers SELECT generate_series(1, 5);`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const rows = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv76psa_notes WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body76) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  const outcome = async (answer: request.Response, tag: string) => ({
    status: answer.status,
    body: answer.body as unknown,
    rows: await rows(tag),
  });

  for (const end of ['COMMIT', 'ROLLBACK'] as const) {
    const kept = end === 'COMMIT' ? ['order'] : [];

    it(`control (${end}): without @Idempotent(), not awaited: 201`, async () => {
      const tag = `plain-${end}`;
      const answer = await post('/plain', undefined, { tag, end });
      expect(await outcome(answer, tag)).toEqual({
        status: 201,
        body: { tag, read: [1, 2, 3, 4, 5] },
        rows: kept,
      });
    }, 30_000);

    it(`control (${end}): keyed, the end awaited: 201`, async () => {
      const tag = `keyed-awaited-${end}`;
      const answer = await post('/keyed', tag, { tag, end, awaitEnd: true });
      expect(await outcome(answer, tag)).toEqual({
        status: 201,
        body: { tag, read: [1, 2, 3, 4, 5] },
        rows: kept,
      });
    }, 30_000);

    it(`keyed (${end}), not awaited: 201, as without the library`, async () => {
      const tag = `keyed-unawaited-${end}`;
      const answer = await post('/keyed', tag, { tag, end });
      expect(await outcome(answer, tag)).toEqual({
        status: 201,
        body: { tag, read: [1, 2, 3, 4, 5] },
        rows: kept,
      });
    }, 30_000);
  }
});
