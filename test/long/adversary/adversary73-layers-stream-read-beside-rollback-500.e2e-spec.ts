/**
 * Adversary 73: a plain read sent as a STREAM (Kysely's `stream()`, a pg-cursor) beside a
 * nested transaction that then rolls back makes the request refused with
 * `StatementBesideNestedTransactionError`: 500, nothing kept, on every try with the same key.
 * The same read sent with `execute()` is let through since round 72 ("A plain read beside it
 * loses nothing and is let through"); as a stream it is not.
 *
 *   const trx = await kdb.startTransaction().execute();
 *   await trx.insertInto('adv73k_notes').values({ tag, what: 'hold' }).execute();
 *   for await (const row of kdb.selectFrom('adv73k_prices').select('price').stream()) {...}
 *   await trx.rollback().execute();                       // the price changed: give up
 *   await kdb.insertInto('adv73k_notes').values({ tag, what: 'quote' }).execute();
 *
 * Why: `PoolTransaction.submit` (lib/data-layers/pool-transaction.ts) calls
 * `this.markBeside(view)` without the statement's text, and `markBeside` only skips a plain
 * read when it has the text (`if (text !== undefined && isPlainRead(text)) return`): every
 * cursor marks the nested transactions it is beside, and their rollback refuses the request.
 *
 * Expected (docs/guides/data-layers.md): "A plain read beside it loses nothing and is let
 * through"; kysely.md lists `stream()` among the forms that join. So 201 with ['quote'], as
 * without the library and as with `execute()`.
 *
 * Control: the same read with `execute()`: 201, ['quote']; the stream without
 * `@Idempotent()`: 201, ['quote'].
 *
 * Severity: medium (a false refusal: correct code answers 500 on every try; nothing lost).
 *
 * Fails now: 'Expected { status: 201, rows: ["quote"] }, Received { status: 500, rows: [] }'
 * (500 `transaction_aborted`: the refusal the rollback met; with `trx.commit()` instead the
 * same stream answers 201) (the two controls pass).
 *
 * Fixed: a cursor is marked beside as it is sent, with its text (`submit`), as a statement:
 * a plain read beside a nested transaction that has written nothing yet is let through.
 * Since the same round (adversary73-layers-read-beside-sees-rolled-back), a read beside one
 * that has written is refused on its rollback (it may have seen that write), as `execute()`
 * and a stream alike: the hold is now inserted after the read (it was before).
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect } from 'kysely';
import { type Pool } from 'pg';
import Cursor from 'pg-cursor';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  adv73k_notes: { id?: number; tag: string; what: string };
  adv73k_prices: { id: number; price: number };
}

let pool: Pool;
let kdb: Kysely<Db>;

type Body73 = { tag: string; query?: boolean };

async function work(body: Body73) {
  const { tag } = body;
  const trx = await kdb.startTransaction().execute();
  const read = kdb.selectFrom('adv73k_prices').select('price'); // the pricing service's kdb
  const prices: number[] = [];
  if (body.query) prices.push(...(await read.execute()).map((row) => row.price));
  else for await (const row of read.stream()) prices.push(row.price);
  await trx.insertInto('adv73k_notes').values({ tag, what: 'hold' }).execute();
  await trx.rollback().execute(); // the price changed: give up the hold
  await kdb.insertInto('adv73k_notes').values({ tag, what: 'quote' }).execute();
  return { tag, prices };
}

@Controller()
class NotesController {
  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body73) {
    return work(body);
  }

  @Post('plain')
  plain(@Body() body: Body73) {
    return work(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('adversary 73: a streamed read beside a nested transaction that rolls back', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv73_stream_read_beside', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        kdb = new Kysely<Db>({ dialect: new PostgresDialect({ pool: started, cursor: Cursor }) });
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv73k_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);
          CREATE TABLE adv73k_prices (id int PRIMARY KEY, price int NOT NULL);
          INSERT INTO adv73k_prices VALUES (1, 10), (2, 20);`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv73k_notes WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body73) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the stream: 201, the quote kept', async () => {
    const answer = await post('/plain', undefined, { tag: 'plain' });
    expect({ status: answer.status, rows: await kept('plain') }).toEqual({
      status: 201,
      rows: ['quote'],
    });
  }, 20_000);

  it('control: the same read with execute(): 201, the quote kept', async () => {
    const answer = await post('/keyed', 'query', { tag: 'query', query: true });
    expect({ status: answer.status, rows: await kept('query') }).toEqual({
      status: 201,
      rows: ['quote'],
    });
  }, 20_000);

  it('the read as a stream: 201, the quote kept (every try)', async () => {
    const answer = await post('/keyed', 'stream', { tag: 'stream' });
    expect({ status: answer.status, rows: await kept('stream') }).toEqual({
      status: 201,
      rows: ['quote'],
    });
  }, 20_000);
});
