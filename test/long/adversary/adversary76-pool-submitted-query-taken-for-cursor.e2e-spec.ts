/**
 * Adversary 76: node-postgres' own `Query` handed to `client.query()` as a submittable (its
 * documented event API: 'row', 'end', 'error'), with a write queued on the same client behind
 * it, answers 500 `cursor_open`, nothing stored, on every try. Without the library: 201, the
 * rows read and the write committed. Keyed, the write sent once the query's 'end' came: 201.
 *
 *   const client = await pool.connect();
 *   const query = client.query(new pg.Query('SELECT n FROM numbers ORDER BY n'));
 *   query.on('row', (row) => read.push(row.n));
 *   const ended = once(query, 'end');
 *   await client.query('INSERT INTO notes (tag) VALUES ($1)', [tag]);   // queued behind it
 *   await ended;
 *   client.release();
 *
 * Why: `JoinedClient.query` hands every submittable to `PoolTransaction.submit`, whose
 * `watchCursor` counts it in `openCursors` as a cursor until its ReadyForQuery; a submittable
 * handed over with nothing pending is not put in the view's turn (`if (this.pending === 0)
 * return submit()`), so the `INSERT` called next on the same client runs at once
 * (`statement`), meets `refuseBehindCursor()` and the request is refused with
 * `CursorOpenRefusedError`. A `pg.Query` is not a cursor: node-postgres runs it to its end
 * with nobody reading it, and the `INSERT` queued behind it on the same client runs next, as
 * node-postgres runs a client's queries in call order. No hang is possible; the refusal (meant
 * for a write that would wait forever behind a stream its own code reads) is a false one.
 *
 * Expected (docs/guides/data-layers.md): "Statements queued on one such client without
 * awaiting (…) run in the order called, as node-postgres runs them"; the `cursor_open` refusal
 * is documented for "Kysely's `stream()`, pg-cursor and pg-query-stream [which] hold the
 * connection they run on until the stream ends", where the write "would wait for the stream
 * and the stream's reader for the write, forever". Neither holds for a `pg.Query`.
 *
 * Control: without `@Idempotent()`: 201, rows [1..5], the note kept; keyed, the `INSERT` sent
 * after the query's 'end': 201, the same.
 *
 * Severity: medium (a false 500 on every try for node-postgres code that is correct without the
 * library; nothing committed twice or held).
 *
 * Fails now: keyed, the INSERT queued behind the query: 500 `{"code":"cursor_open",…}`.
 *
 * Suggested fix: in `JoinedClient.query` put a submittable handed over with nothing pending in
 * the view's turn too (the next call on the view waits until node-postgres says it ended), so
 * that a statement queued behind it on the same client is judged after it, as it runs; and/or
 * count only submittables that stop mid-way (pg-cursor's `read`, a stream: `cursorOf`) as open
 * cursors in `refuseBehindCursor`, not a `pg.Query` that runs to its end by itself.
 *
 * Fixed: only a submittable that stops mid-way (`cursorOf`) counts as an open cursor; one that
 * runs to its end (a `pg.Query`) is put in its view's turn until node-postgres says it ended
 * (`endOf`, lib/transaction/submitted-end.ts).
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { once } from 'node:events';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body76 = { tag: string; afterEnd?: boolean };

async function work(pool: Pool, { tag, afterEnd }: Body76) {
  const client = await pool.connect();
  const read: number[] = [];
  try {
    const query = client.query(new pg.Query('SELECT n FROM adv76psq_numbers ORDER BY n'));
    query.on('row', (row: { n: number }) => read.push(row.n));
    const ended = once(query, 'end');
    if (afterEnd) await ended;
    await client.query('INSERT INTO adv76psq_notes (tag) VALUES ($1)', [tag]);
    await ended;
  } finally {
    client.release();
  }
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

describe('adversary 76: a pg.Query submittable with a write queued behind it on its client', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_submitted_query', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv76psq_notes (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE adv76psq_numbers (n int PRIMARY KEY);
          INSERT INTO adv76psq_numbers SELECT generate_series(1, 5);`);
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
          'SELECT count(*) FROM adv76psq_notes WHERE tag = $1',
          [tag],
        )
      ).rows[0].count,
    );

  const post = (path: string, key: string | undefined, body: Body76) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  const outcome = async (answer: request.Response, tag: string) => ({
    status: answer.status,
    body: answer.body as unknown,
    notes: await notes(tag),
  });

  it('control: without @Idempotent(), the INSERT queued behind the query: 201', async () => {
    const tag = 'plain-queued';
    const answer = await post('/plain', undefined, { tag });
    expect(await outcome(answer, tag)).toEqual({
      status: 201,
      body: { tag, read: [1, 2, 3, 4, 5] },
      notes: 1,
    });
  }, 30_000);

  it("control: keyed, the INSERT sent after the query's 'end': 201", async () => {
    const tag = 'keyed-after-end';
    const answer = await post('/keyed', tag, { tag, afterEnd: true });
    expect(await outcome(answer, tag)).toEqual({
      status: 201,
      body: { tag, read: [1, 2, 3, 4, 5] },
      notes: 1,
    });
  }, 30_000);

  it('keyed, the INSERT queued behind the query: 201, as without the library', async () => {
    const tag = 'keyed-queued';
    const answer = await post('/keyed', tag, { tag });
    expect(await outcome(answer, tag)).toEqual({
      status: 201,
      body: { tag, read: [1, 2, 3, 4, 5] },
      notes: 1,
    });
  }, 30_000);
});
