/**
 * Adversary 76 (kysely): a nested transaction begun with its first statement in one text, on a
 * connection of the pool (`BEGIN; SET LOCAL lock_timeout = '2s'`, sent as one simple query), is
 * refused under `@Idempotent()` with `TransactionControlRefusedError` ("BEGIN refused: ... code
 * in it must not end it"); the handler's 500 is stored and replayed for ever. Without the
 * library the same code commits its rows and answers 201.
 *
 *   // Kysely's single connection (db.connection()), as its docs show for session work:
 *   await db.connection().execute(async (conn) => {
 *     await sql.raw(`BEGIN; SET LOCAL lock_timeout = '2s'`).execute(conn);
 *     await conn.insertInto('items').values({ sku }).execute();
 *     await sql`COMMIT`.execute(conn);
 *   });
 *   // the same with pg itself: client.query(`BEGIN; SET LOCAL lock_timeout = '2s'`) on
 *   // pool.connect(), or one text `BEGIN; INSERT …; INSERT …; COMMIT`.
 *
 * Why: on a view of the request's connection (`JoinedClient.query`,
 * lib/data-layers/pool-transaction.ts) the text becomes a nested transaction's control only
 * through `nestedControlOf` (lib/transaction/sql/sql-text.ts), which takes ONE statement
 * ("Undefined for ... several statements; those are left to `transactionControlOf`, which
 * refuses what would end the request's transaction"). So `BEGIN; SET LOCAL …` goes on as a
 * plain statement, and `PoolTransaction.statement` → `refusalOf`
 * (lib/transaction/request-transaction.ts) → `transactionControlOf` finds its `BEGIN` and
 * refuses it as if it were sent through `pool.query()`. The BEGIN of a text on a connection
 * the data layer took from the pool is its own nested transaction's, not the request's.
 *
 * Docs (docs/guides/data-layers.md): "`pool.connect()` gives a view of the request's
 * connection. A data layer opens its own transactions on such a connection with `BEGIN`;
 * there, `BEGIN` (or `START TRANSACTION`) is a savepoint, `COMMIT` releases it and `ROLLBACK`
 * rolls back to it." Refusal is promised only for "`COMMIT`, `ROLLBACK`, `BEGIN` sent through
 * `pool.query()` itself (not a nested transaction's own)". The same page counts statements
 * "among other statements of one text" and "in one text or two" as supported
 * (`SAVEPOINT s; SELECT set_config(…, true)`).
 *
 * Severity: medium (a false error answered and STORED for code that is right, replayed for
 * ever for the key; the message talks of ending the request's transaction, which the code
 * does not do). Nothing is committed twice.
 *
 * Fails now: the keyed route answers 500 `{"statusCode":500,"message":"Internal server
 * error"}` (TransactionControlRefusedError: "BEGIN refused: ..."), stored (`state` done,
 * `response_code` 500) and replayed; no row committed. The control (same code without the
 * library) answers 201 with its rows; the safe variant (BEGIN sent alone) answers 201 under
 * the library too.
 *
 * Suggested fix: on a view (`JoinedClient`), split a text that begins (or ends) with a nested
 * transaction's control among other statements: take its leading `BEGIN`/`START TRANSACTION`
 * (with its modes) as the savepoint's start and send the rest inside it (likewise a trailing
 * `COMMIT`/`ROLLBACK` as its end), as `statementStepsOf` already walks a text's statements for
 * settings; refuse only what a text does beyond that (a `COMMIT` in its middle, a chain).
 *
 * Fixed: on a view, a text of several statements is cut at its leading `BEGIN` and trailing
 * `COMMIT`/`ROLLBACK`, run as the nested transaction's controls around its body
 * (lib/data-layers/one-text-nested.ts, `PoolTransaction.onView`).
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  items: { id: string; sku: string };
}

let pool: Pool;
let db: Kysely<Db>;

type Form = 'one-text' | 'alone';

/** The app's work: a transaction of its own on one connection of the pool. */
async function placeItems(sku: string, form: Form): Promise<{ sku: string }> {
  await db.connection().execute(async (conn) => {
    if (form === 'one-text') {
      await sql.raw(`BEGIN; SET LOCAL lock_timeout = '2s'`).execute(conn);
    } else {
      await sql`BEGIN`.execute(conn);
      await sql.raw(`SET LOCAL lock_timeout = '2s'`).execute(conn);
    }
    await conn
      .insertInto('items')
      .values({ sku: `${sku}-1` } as never)
      .execute();
    await conn
      .insertInto('items')
      .values({ sku: `${sku}-2` } as never)
      .execute();
    await sql`COMMIT`.execute(conn);
  });
  return { sku };
}

@Controller('items')
class ItemsController {
  @Post('keyed')
  @HttpCode(201)
  @Idempotent()
  keyed(@Body() body: { sku: string; form: Form }) {
    return placeItems(body.sku, body.form);
  }

  /** The control: the same code without the library. */
  @Post('plain')
  @HttpCode(201)
  plain(@Body() body: { sku: string; form: Form }) {
    return placeItems(body.sku, body.form);
  }
}

describe('adversary 76 kysely: a nested BEGIN sent with its first statement in one text', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [ItemsController],
    })
    class ItemsModule {}
    fixture = await startPoolApp('adv76_kysely_one_text_begin', {
      module: ItemsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = new Kysely<Db>({ dialect: new PostgresDialect({ pool: started }) });
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE items (id bigserial PRIMARY KEY, sku text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(route: 'keyed' | 'plain', sku: string, form: Form) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/items/${route}`)
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku, form })
      .timeout(20_000);
    return { status: answer.status, body: answer.text };
  }

  async function rowsOf(sku: string): Promise<string[]> {
    const { rows } = await fixture.admin.query<{ sku: string }>(
      `SELECT sku FROM items WHERE sku LIKE $1`,
      [`${sku}-%`],
    );
    return rows.map((row) => row.sku).sort();
  }

  it('control: without the library, the one-text BEGIN commits both rows (201)', async () => {
    const first = await post('plain', 'plain-one-text', 'one-text');
    expect(first).toEqual({ status: 201, body: JSON.stringify({ sku: 'plain-one-text' }) });
    expect(await rowsOf('plain-one-text')).toEqual(['plain-one-text-1', 'plain-one-text-2']);
  });

  it('control: under the library, BEGIN sent alone is a savepoint and commits (201)', async () => {
    const first = await post('keyed', 'keyed-alone', 'alone');
    const retried = await post('keyed', 'keyed-alone', 'alone');
    expect(first).toEqual({ status: 201, body: JSON.stringify({ sku: 'keyed-alone' }) });
    expect(retried).toEqual(first);
    expect(await rowsOf('keyed-alone')).toEqual(['keyed-alone-1', 'keyed-alone-2']);
  });

  it('under the library, the one-text BEGIN is a savepoint too: 201, both rows, replayed', async () => {
    const first = await post('keyed', 'keyed-one-text', 'one-text');
    const retried = await post('keyed', 'keyed-one-text', 'one-text');
    const { rows: stored } = await fixture.admin.query<{ response_code: number }>(
      `SELECT response_code FROM idempotency_keys WHERE key = $1`,
      ['key-keyed-one-text'],
    );
    expect({
      first,
      retried,
      rows: await rowsOf('keyed-one-text'),
      stored: stored.map((row) => row.response_code),
    }).toEqual({
      first: { status: 201, body: JSON.stringify({ sku: 'keyed-one-text' }) },
      retried: { status: 201, body: JSON.stringify({ sku: 'keyed-one-text' }) },
      rows: ['keyed-one-text-1', 'keyed-one-text-2'],
      stored: [201],
    });
  });
});
