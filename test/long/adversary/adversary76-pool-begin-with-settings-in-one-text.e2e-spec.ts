/**
 * Adversary 76: node-postgres code that begins its transaction and sets its local settings in
 * one round trip (`client.query("BEGIN; SET LOCAL lock_timeout = '2s'")`, a common way to bound
 * a transaction's lock waits) answers 500 in an `@Idempotent()` handler (refused with
 * `TransactionControlRefusedError`), no row, on every try. Without the library: 201, the row
 * committed. Keyed, the same two statements sent one by one: 201.
 *
 *   const client = await pool.connect();
 *   try {
 *     await client.query("BEGIN; SET LOCAL lock_timeout = '2s'");
 *     await client.query('INSERT INTO notes (tag) VALUES ($1)', [tag]);
 *     await client.query('COMMIT');
 *   } catch (error) {
 *     await client.query('ROLLBACK');
 *     throw error;
 *   } finally {
 *     client.release();
 *   }
 *
 * Why: `JoinedClient.query` → `nestedControlOf(text)` reads a nested transaction's `BEGIN` only
 * when it is the text's one statement (`statements?.length !== 1` → undefined); the text goes to
 * `PoolTransaction.statement` as an ordinary statement, where `refusalOf` →
 * `transactionControlOf` finds its `BEGIN` and refuses the request with
 * `TransactionControlRefusedError`. The view's own `BEGIN`, which on its own is a savepoint, is
 * taken for one that would end or start the request's transaction. (The handler's `ROLLBACK`
 * in its `catch` is then refused too: the view has no nested transaction open.)
 *
 * Expected (docs/guides/data-layers.md): "`pool.connect()` gives a view of the request's
 * connection. A data layer opens its own transactions on such a connection with `BEGIN`;
 * there, `BEGIN` (or `START TRANSACTION`) is a savepoint, `COMMIT` releases it and `ROLLBACK`
 * rolls back to it." The refusal of `BEGIN` "among other statements" is documented for what
 * would end the request's transaction (docs/guides/transactions.md), which a view's `BEGIN`
 * does not.
 *
 * Control: without `@Idempotent()`: 201, one row; keyed with `BEGIN` and the `SET LOCAL` sent
 * one by one: 201, one row.
 *
 * Severity: medium (a false 500 on every try for correct node-postgres code; nothing committed
 * twice; the refusal names transaction control, not what to change).
 *
 * Fails now: keyed, one text: 500 (the refusal the handler rethrows: Nest's "Internal server
 * error"), no row.
 *
 * Suggested fix: on a view, split a text whose first statement is a nested `BEGIN`/`START
 * TRANSACTION` (or whose last is a `COMMIT`/`ROLLBACK`) into that control, handled as the
 * view's nested transaction, and the rest, sent inside it (the rest noted as the nested
 * transaction's own statements: `noteSent`); or at least refuse it with an error that says to
 * send `BEGIN` alone.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body76 = { tag: string; apart?: boolean };

async function work(pool: Pool, { tag, apart }: Body76) {
  const client = await pool.connect();
  try {
    if (apart) {
      await client.query('BEGIN');
      await client.query("SET LOCAL lock_timeout = '2s'");
    } else {
      await client.query("BEGIN; SET LOCAL lock_timeout = '2s'");
    }
    await client.query('INSERT INTO adv76pbs_notes (tag) VALUES ($1)', [tag]);
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

describe('adversary 76: BEGIN and SET LOCAL in one text on a client of the pool', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_begin_settings', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv76pbs_notes (id serial PRIMARY KEY, tag text NOT NULL)');
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
          'SELECT count(*) FROM adv76pbs_notes WHERE tag = $1',
          [tag],
        )
      ).rows[0].count,
    );

  const post = (path: string, key: string | undefined, body: Body76) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), one text: 201', async () => {
    const tag = 'plain-one-text';
    const answer = await post('/plain', undefined, { tag });
    expect({ status: answer.status, notes: await notes(tag) }).toEqual({ status: 201, notes: 1 });
  }, 30_000);

  it('control: keyed, BEGIN and SET LOCAL one by one: 201', async () => {
    const tag = 'keyed-apart';
    const answer = await post('/keyed', tag, { tag, apart: true });
    expect({ status: answer.status, notes: await notes(tag) }).toEqual({ status: 201, notes: 1 });
  }, 30_000);

  it('keyed, one text: 201, as without the library', async () => {
    const tag = 'keyed-one-text';
    const answer = await post('/keyed', tag, { tag });
    expect({
      status: answer.status,
      body: answer.status === 201 ? undefined : (answer.body as unknown),
      notes: await notes(tag),
    }).toEqual({ status: 201, body: undefined, notes: 1 });
  }, 30_000);
});
