/**
 * Adversary 75d: a pg-query-stream that its code destroys right after making it (not needed
 * after all), then a write on the same client, answers 500 `cursor_open` on every try: the
 * destroyed stream still counts open. Without
 * the library: 201, the booking kept (node-postgres submits the stream at once on an idle
 * client, and `destroy()` sends its Close and Sync). Keyed, the stream read (left by `break`,
 * round 75's fix): 201.
 *
 *   const client = await pool.connect();
 *   const stream = client.query(new QueryStream('SELECT id FROM seats ORDER BY id'));
 *   let seat = body.seat;
 *   if (seat === undefined) {
 *     for await (const row of stream) { seat = row.id; break; }       // closes the stream
 *   } else {
 *     stream.destroy();                                               // chosen: not needed
 *   }
 *   await client.query('INSERT INTO bookings (seat, tag) VALUES ($1, $2)', [seat, tag]);
 *
 * Why: `PoolTransaction.submit` (lib/data-layers/pool-transaction.ts) hands a submittable to
 * node-postgres only after `connection()`, `makeSavepoints` and `send`'s `begin(client)`: a
 * few turns later. `watchCursor` withdraws a cursor closed before then through the
 * submittable's own `close()` ('held' → 'withdrawn', and `withdrawn()` keeps it from being
 * submitted); a pg-query-stream has no `close()` (its `_destroy` calls `this.cursor.close`),
 * so that path is skipped (`typeof close !== 'function'`). Round 75's `endOnClose` wraps the
 * inner cursor's `close`, but only forgets a cursor that `closesOnTheWire` (has a
 * connection): this one has none yet, so it stays in `openCursors`; pg-cursor's `close()`
 * without a connection does nothing (`setImmediate(cb)`). The write is then refused by
 * `refuseBehindCursor` (CursorOpenRefusedError). (Had the write been let through, the stream
 * would then be submitted, Parse/Bind/Describe/Flush with no Sync, its portal open on the
 * request's connection with nobody to read or close it.)
 * endOnClose's own comment says "one closed before it ran is seen to below": not for a
 * pg-query-stream.
 *
 * Expected (docs/guides/data-layers.md): "Read the stream to its end before writing"; round
 * 75's fix (681c645): "a running cursor closed by its code (a pg-query-stream left by break)
 * no longer counts open; the write after it runs", and for one closed before it ran, "still
 * withdrawn or closed once it runs" (adversary75-pool-query-stream-break-refused's Fixed
 * note); transactions.md, for TypeORM's twin: "`destroy()` closes it: a statement sent right
 * after runs once the close's round trip is done, as without the library".
 *
 * Control: without `@Idempotent()`: 201, the booking; keyed, the stream read and left by
 * `break`: 201, the booking.
 *
 * Severity: medium (a false refusal on every try of node-postgres code that is correct
 * without the library; nothing lost or run twice).
 *
 * Fails now: 'Expected {"status":201,"body":{"seat":7},"rows":[7]}, Received
 * {"status":500,"body":{"code":"cursor_open",…},"rows":[]}'; the two controls pass.
 *
 * Suggested fix: withdraw a submittable whose cursor (`cursorOf`) is closed before it was
 * submitted, whatever wraps it: in `endOnClose`, when `closesOnTheWire` is false and the
 * stage is 'held' (or 'queued'), mark it withdrawn (or close it on submit) and forget it, as
 * `watchCursor` does for a pg-cursor.
 *
 * Fixed: `endOnClose` (lib/data-layers/pool-transaction.ts) now holds the stage logic
 * `watchCursor` had for a pg-cursor's own `close()`, on the cursor `cursorOf` finds (the one a
 * pg-query-stream wraps) and the submittable's `submit`: closed while held, the stream is
 * withdrawn (stage 'withdrawn', out of `openCursors`) and `withdrawn()` keeps `send` from
 * handing it to node-postgres; closed while queued, its close is sent once it is submitted.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import QueryStream from 'pg-query-stream';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;

type Booking = { tag: string; seat?: number };

async function book(body: Booking) {
  const client = await pool.connect();
  try {
    const stream = client.query(new QueryStream('SELECT id FROM adv75dqd_seats ORDER BY id'));
    let seat = body.seat;
    if (seat === undefined) {
      for await (const row of stream as AsyncIterable<{ id: number }>) {
        seat = row.id;
        break;
      }
    } else {
      stream.destroy();
    }
    await client.query('INSERT INTO adv75dqd_bookings (seat, tag) VALUES ($1, $2)', [
      seat,
      body.tag,
    ]);
    return { seat };
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

describe('adversary 75d: a pg-query-stream destroyed before it ran, then a write', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75d_stream_unsubmitted', {
      module: BookingsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv75dqd_seats (id int PRIMARY KEY)');
        await admin.query('INSERT INTO adv75dqd_seats SELECT generate_series(1, 500)');
        await admin.query('CREATE TABLE adv75dqd_bookings (seat int NOT NULL, tag text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const bookings = async (tag: string) =>
    (
      await fixture.admin.query<{ seat: number }>(
        'SELECT seat FROM adv75dqd_bookings WHERE tag = $1',
        [tag],
      )
    ).rows.map((row) => row.seat);

  const post = (path: string, key: string | undefined, body: Booking) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the stream destroyed, the write runs: 201', async () => {
    const answer = await post('/plain', undefined, { tag: 'plain', seat: 7 });
    expect({ status: answer.status, body: answer.body, rows: await bookings('plain') }).toEqual({
      status: 201,
      body: { seat: 7 },
      rows: [7],
    });
  }, 20_000);

  it('control: keyed, the stream read and left by break: 201', async () => {
    const answer = await post('/keyed', 'read', { tag: 'read' });
    expect({ status: answer.status, body: answer.body, rows: await bookings('read') }).toEqual({
      status: 201,
      body: { seat: 1 },
      rows: [1],
    });
  }, 20_000);

  it('keyed, the stream destroyed before it ran, then the write: 201', async () => {
    const answer = await post('/keyed', 'destroyed', { tag: 'destroyed', seat: 7 });
    expect({
      status: answer.status,
      body: answer.body,
      rows: await bookings('destroyed'),
    }).toEqual({ status: 201, body: { seat: 7 }, rows: [7] });
  }, 30_000);
});
