/**
 * Adversary 75 (the TypeORM fixer's lead, on the pool seam): leaving a `for await` loop over
 * a pg-query-stream early (`break` once the row sought is found) closes the stream, as
 * node-postgres' docs show; the write sent right after it is refused (`cursor_open`, 500 on
 * every try), though nothing is open any more from the handler's side: node-postgres queues
 * that write behind the stream's close and runs it.
 *
 *   const client = await pool.connect();
 *   for await (const row of client.query(new QueryStream('SELECT id FROM seats …'))) {
 *     if (row.id === wanted) { found = row.id; break; }            // closes the stream
 *   }
 *   await client.query('INSERT INTO bookings (seat) VALUES ($1)', [found]);
 *
 * Why: `PoolTransaction.watchCursor` (lib/data-layers/pool-transaction.ts) counts a cursor
 * open until node-postgres says it ended (`handleReadyForQuery`), a round trip after its
 * close is sent; Node's stream iterator destroys the stream on `break` without waiting for
 * that close, so the next statement is called while the cursor still counts open and
 * `refuseBehindCursor` refuses it.
 *
 * Expected (docs/guides/data-layers.md): "Read the stream to its end (or close it) before
 * writing"; closed, the write runs (it queues behind the close on the one connection).
 *
 * Control: the same code without `@Idempotent()` (201, one booking); the stream read to its
 * end before the write (201, one booking).
 *
 * Severity: medium (a false refusal, on every try, of ordinary node-postgres code).
 *
 * Fails now (before the fix): 'Received body { code: "cursor_open", status: 500 … }'.
 *
 * Fixed: `PoolTransaction.endOnClose` (lib/data-layers/pool-transaction.ts) wraps the close of
 * the cursor a stream holds (`cursorOf`, open-streams.ts): a running cursor its code closes no
 * longer counts open (`closesOnTheWire`), as on TypeORM's path; one closed before it ran is
 * still withdrawn or closed once it runs.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import QueryStream from 'pg-query-stream';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;

type Booking = { tag: string; toEnd?: boolean };

async function book(body: Booking) {
  const client = await pool.connect();
  try {
    let found: number | undefined;
    const stream = client.query(new QueryStream('SELECT id FROM adv75q_seats ORDER BY id'));
    for await (const row of stream as AsyncIterable<{ id: number }>) {
      if (found === undefined && row.id === 2) {
        found = row.id;
        if (!body.toEnd) break;
      }
    }
    await client.query('INSERT INTO adv75q_bookings (seat, tag) VALUES ($1, $2)', [
      found,
      body.tag,
    ]);
    return { seat: found };
  } finally {
    client.release();
  }
}

@Controller()
class BookingsController {
  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Booking) {
    return book(body);
  }

  @Post('plain')
  plain(@Body() body: Booking) {
    return book(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [BookingsController],
})
class BookingsModule {}

describe('adversary 75: a pg-query-stream left by break, then a write', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75_query_stream', {
      module: BookingsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv75q_seats (id int PRIMARY KEY)');
        await admin.query('INSERT INTO adv75q_seats SELECT generate_series(1, 500)');
        await admin.query('CREATE TABLE adv75q_bookings (seat int NOT NULL, tag text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const bookings = async (tag: string) =>
    (
      await fixture.admin.query<{ seat: number }>(
        'SELECT seat FROM adv75q_bookings WHERE tag = $1',
        [tag],
      )
    ).rows.map((row) => row.seat);

  const post = (path: string, key: string | undefined, body: Booking) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the write after the break runs: 201, one booking', async () => {
    const answer = await post('/plain', undefined, { tag: 'plain' });
    expect({ status: answer.status, body: answer.body }).toEqual({
      status: 201,
      body: { seat: 2 },
    });
    expect(await bookings('plain')).toEqual([2]);
  }, 20_000);

  it('control: the stream read to its end, then the write: 201, one booking', async () => {
    const answer = await post('/keyed', 'to-end', { tag: 'to-end', toEnd: true });
    expect({ status: answer.status, body: answer.body }).toEqual({
      status: 201,
      body: { seat: 2 },
    });
    expect(await bookings('to-end')).toEqual([2]);
  }, 20_000);

  it('the stream left by break, then the write: 201, one booking, replayed', async () => {
    const answer = await post('/keyed', 'break', { tag: 'break' });
    const replay = await post('/keyed', 'break', { tag: 'break' });
    expect({ status: answer.status, body: answer.body }).toEqual({
      status: 201,
      body: { seat: 2 },
    });
    expect({ status: replay.status, body: replay.body }).toEqual({
      status: 201,
      body: { seat: 2 },
    });
    expect(await bookings('break')).toEqual([2]);
  }, 20_000);
});
