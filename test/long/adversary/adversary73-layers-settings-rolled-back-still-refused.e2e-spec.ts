/**
 * Adversary 73: a setting a nested transaction set for itself INSIDE one of its data layer's
 * savepoints (Drizzle's nested `tx.transaction()`: a bounded step, `SET LOCAL
 * statement_timeout = '100ms'`, which timed out and rolled back to its savepoint, the
 * fallback taken) is ended by that rollback, as PostgreSQL ends it; yet a write beside the
 * nested transaction afterwards (the audit service's own `db`) is refused with
 * `StatementBesideNestedTransactionError('settings')`: 500, nothing kept, on every try with
 * the same key, for code that is correct and that runs without the library.
 *
 *   await db.transaction(async (tx) => {
 *     await tx.transaction(async (fast) => {                      // savepoint sp1
 *       await fast.execute(sql`SET LOCAL statement_timeout = '100ms'`); // bound this step
 *       await fast.execute(sql`SELECT pg_sleep(0.5)`);            // times out: 57014
 *     }).catch(() => undefined);                                  // rollback to savepoint sp1
 *     await tx.insert(notes).values({ tag, what: 'order' });      // the slow path
 *     await db.insert(notes).values({ tag, what: 'audit' });      // the service's db
 *   });
 *
 * Why: `PoolTransaction.noteInside` (lib/data-layers/pool-transaction.ts) sets
 * `localSettings` on the view's innermost LIBRARY savepoint (the nested transaction) for any
 * statement with `localSettingsOf(...)`, whatever data layer savepoint (`InnerSavepoint`) it
 * ran in; the `ROLLBACK TO SAVEPOINT sp1` that ends the setting splices `this.inner` but
 * never clears the flag, so `refuseBesideIdentity` refuses every statement beside the nested
 * transaction until it ends.
 *
 * Expected (docs/guides/data-layers.md): "Once that transaction has set its role ... such a
 * statement would run as that role: it is refused ... The same once it has set any setting
 * for itself (`SET LOCAL statement_timeout`, ...): the statement would run under that
 * timeout". Here it would not: the setting was rolled back (`SHOW statement_timeout` in the
 * nested transaction reads the session's again). With the setting gone, the audit beside a
 * nested transaction that commits is kept, as the docs say of beside statements ("If that
 * nested transaction commits, both are kept"): 201, both rows.
 *
 * Control: the same code without the `SET LOCAL` in the savepoint: 201, both rows; the same
 * without `@Idempotent()`: 201, both rows.
 *
 * Severity: medium (a false refusal: a correct request answers 500 on every try and never
 * succeeds; nothing is lost or run twice).
 *
 * Fails now: 'Expected { status: 201, code: undefined }, Received { status: 500, code: undefined }' (the audit's insert throws
 * StatementBesideNestedTransactionError: '... after that transaction set a setting for itself')
 * (the two controls pass).
 *
 * Fixed: a setting is noted on the innermost savepoint it was set in, the data layer's own
 * included (`InnerSavepoint.localSettings`): rolled back to, it ends; released, it passes to
 * the one around it.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const notes = pgTable('adv73s_notes', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
  what: text('what').notNull(),
});

let pool: Pool;
let db: NodePgDatabase;

type Body73 = { tag: string; bound?: boolean };

async function work(body: Body73) {
  const { tag } = body;
  let timeout = '';
  await db.transaction(async (tx) => {
    await tx
      .transaction(async (fast) => {
        if (body.bound) await fast.execute(sql`SET LOCAL statement_timeout = '100ms'`);
        await fast.execute(sql`SELECT pg_sleep(${body.bound ? 0.5 : 0})`);
        if (!body.bound) fast.rollback();
      })
      .catch(() => undefined);
    const shown = await tx.execute<{ statement_timeout: string }>(sql`SHOW statement_timeout`);
    timeout = shown.rows[0].statement_timeout;
    await tx.insert(notes).values({ tag, what: 'order' });
    await db.insert(notes).values({ tag, what: 'audit' }); // the service's own db
  });
  return { tag, timeout };
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

describe('adversary 73: a setting rolled back with its savepoint still refuses beside work', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv73_settings_rolled_back', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv73s_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv73s_notes WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body73) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the bounded step timed out, both rows kept', async () => {
    const tag = 'plain';
    const answer = await post('/plain', undefined, { tag, bound: true });
    expect(answer.status).toBe(201);
    expect(await kept(tag)).toEqual(['audit', 'order']);
  }, 20_000);

  it('control: no SET LOCAL in the savepoint: 201, both rows', async () => {
    const tag = 'unbound';
    const answer = await post('/keyed', tag, { tag });
    expect(answer.status).toBe(201);
    expect(await kept(tag)).toEqual(['audit', 'order']);
  }, 20_000);

  it('the SET LOCAL rolled back with its savepoint: the audit beside is kept, 201 (every try)', async () => {
    const tag = 'bounded';
    const answer = await post('/keyed', tag, { tag, bound: true });
    // Received: 500, StatementBesideNestedTransactionError('settings') from the audit's insert.
    expect({ status: answer.status, code: answer.body.code }).toEqual({
      status: 201,
      code: undefined,
    });
    expect(answer.body.timeout).not.toBe('100ms');
    expect(await kept(tag)).toEqual(['audit', 'order']);
  }, 20_000);
});
