/**
 * Adversary 73: a write sent beside a nested transaction BEFORE a data layer's inner
 * savepoint (Drizzle's nested `tx.transaction()`) is begun, under one `Promise.all`, is taken
 * as sent inside that savepoint: when the savepoint rolls back (its step given up), the
 * request is refused (500, nothing kept), on every try with the same key. The write went to
 * the connection before the `savepoint sp1` and ran outside it (the rollback does not touch
 * it: the nested transaction commits and keeps it), so nothing was at risk; without the
 * library the code answers 201 with both rows.
 *
 *   await db.transaction(async (tx) => {
 *     await tx.insert(notes).values({ tag, what: 'order' });
 *     await Promise.all([
 *       db.insert(notes).values({ tag, what: 'audit' }),           // the service's db
 *       tx.transaction(async (gift) => {                           // savepoint sp1
 *         await gift.insert(notes).values({ tag, what: 'gift' });
 *         gift.rollback();                                         // no gift wrap today
 *       }).catch(() => undefined),
 *     ]);
 *   });
 *
 * Why: `PoolTransaction.noteInside` (lib/data-layers/pool-transaction.ts) pushes the data
 * layer's `SAVEPOINT sp1` onto `this.inner` when its text is TAKEN (synchronously in
 * `statement()`), while `markBeside` marks every `InnerSavepoint` of another view when a
 * statement is SENT, with no check that the SAVEPOINT went before it (the library's own
 * savepoints are checked with `savepoint.made`: round 72's fix (2)). The audit, taken first
 * and sent first, is marked beside `sp1` taken meanwhile; `rollback to savepoint sp1` then
 * refuses the request.
 *
 * Expected (docs/guides/data-layers.md): "if it rolls back, it would take the statement
 * along ... so the rollback is refused" — here it takes nothing along; kysely.md: "Parallel
 * queries (`Promise.all` of selects and inserts) are fine". So 201 with ['audit', 'order']
 * (as without the library), or at the very least not a refusal.
 *
 * Wire order, seen with node-postgres' `Client.prototype.query` logged: the order's insert,
 * the audit's insert, `savepoint sp1`, the gift's insert, `rollback to savepoint sp1`, the
 * nested transaction's RELEASE: the audit ran before sp1.
 *
 * Control: the same code without `@Idempotent()`: 201, ['audit', 'order']; the audit awaited
 * before `tx.transaction()`: 201, ['audit', 'order'].
 *
 * Severity: medium (a false refusal: correct code answers 500 on every try; nothing lost).
 *
 * Fails now: 'Expected { status: 201, rows: ["audit","order"] }, Received { status: 500,
 * rows: [] }' (the two controls pass).
 *
 * Fixed: a data layer's SAVEPOINT is noted as it is sent (`noteSent`): a statement sent before
 * it is not inside it.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const notes = pgTable('adv73i_notes', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
  what: text('what').notNull(),
});

let pool: Pool;
let db: NodePgDatabase;

type Body73 = { tag: string; awaited?: boolean };

async function work(body: Body73) {
  const { tag } = body;
  await db.transaction(async (tx) => {
    await tx.insert(notes).values({ tag, what: 'order' });
    const gift = () =>
      tx
        .transaction(async (sp) => {
          await sp.insert(notes).values({ tag, what: 'gift' });
          sp.rollback(); // no gift wrap today
        })
        .catch(() => undefined);
    if (body.awaited) {
      await db.insert(notes).values({ tag, what: 'audit' });
      await gift();
    } else {
      await Promise.all([db.insert(notes).values({ tag, what: 'audit' }), gift()]);
    }
  });
  return { tag };
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

describe('adversary 73: a write sent before an inner savepoint is taken as inside it', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv73_inner_false_beside', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv73i_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv73i_notes WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body73) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(): 201, audit and order', async () => {
    const answer = await post('/plain', undefined, { tag: 'plain' });
    expect({ status: answer.status, rows: await kept('plain') }).toEqual({
      status: 201,
      rows: ['audit', 'order'],
    });
  }, 20_000);

  it('control: the audit awaited before the inner savepoint: 201, audit and order', async () => {
    const answer = await post('/keyed', 'awaited', { tag: 'awaited', awaited: true });
    expect({ status: answer.status, rows: await kept('awaited') }).toEqual({
      status: 201,
      rows: ['audit', 'order'],
    });
  }, 20_000);

  it('Promise.all of the audit and the inner savepoint: 201, audit and order (every try)', async () => {
    const answer = await post('/keyed', 'together', { tag: 'together' });
    expect({ status: answer.status, rows: await kept('together') }).toEqual({
      status: 201,
      rows: ['audit', 'order'],
    });
  }, 20_000);
});
