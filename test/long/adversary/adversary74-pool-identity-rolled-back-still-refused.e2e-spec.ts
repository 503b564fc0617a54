/**
 * Adversary 74: a role a nested transaction set for itself INSIDE one of its data layer's
 * savepoints (Drizzle's nested `tx.transaction()`: the row-level-security recipe's `SET LOCAL
 * ROLE` for the user's own part, which failed and rolled back to its savepoint) is ended by
 * that rollback, as PostgreSQL ends it; yet a write beside the nested transaction afterwards
 * (the audit service's own `db`) is refused with `StatementBesideNestedTransactionError(true)`
 * ("after that transaction set its role"): 500, nothing kept, on every try with the same key,
 * for code that is correct and that runs without the library.
 *
 *   await db.transaction(async (tx) => {
 *     await tx.insert(notes).values({ tag, what: 'order' });
 *     await tx.transaction(async (asUser) => {                    // savepoint sp1
 *       await asUser.execute(sql.raw(`SET LOCAL ROLE app_user`));  // RLS for the user's part
 *       await asUser.insert(notes).values({ tag, what: 'theirs' }); // refused by the policy
 *     }).catch(() => undefined);                                   // rollback to savepoint sp1
 *     await db.insert(notes).values({ tag, what: 'audit' });       // the service's db
 *   });
 *
 * Why: `PoolTransaction.noteInside` (lib/data-layers/pool-transaction.ts) sets `setIdentity`
 * on the view's OUTERMOST library savepoint (`view.savepoints[0].setIdentity = true`) for any
 * statement with `setsIdentity(...)`, whatever data-layer savepoint (`InnerSavepoint`) it ran
 * in. `noteSent`'s `ROLLBACK TO` branch clears the inner savepoint's `localSettings` (round
 * 73's fix for settings) but nothing clears `setIdentity`, so `refuseBesideIdentity` refuses
 * every statement beside the nested transaction until it ends, although the role is gone
 * (`current_user` in the nested transaction reads the login again).
 *
 * Expected (docs/guides/data-layers.md): "Once that transaction has set its role, session
 * authorization or search path (`SET LOCAL ROLE`, the RLS recipe), such a statement would run
 * as that role: it is refused". Here it would not: the role was rolled back. With the role
 * gone, the audit beside a nested transaction that commits is kept, as the docs say of beside
 * statements ("If that nested transaction commits, both are kept"): 201, both rows.
 *
 * The same with Kysely's savepoint API (`trx.savepoint('as_user')`, `SET LOCAL ROLE`, the
 * user's insert refused, `rollbackToSavepoint('as_user')`, then the service's `kdb` beside):
 * 500 alike.
 *
 * Control: the same code without the `SET LOCAL ROLE` in the savepoint: 201, both rows; the
 * same without `@Idempotent()`: 201, both rows.
 *
 * Severity: medium (a false refusal: a correct request answers 500 on every try and never
 * succeeds; nothing is lost or run twice).
 *
 * Fails now: 'Expected { status: 201 }, Received { status: 500 }' (the audit's insert throws
 * StatementBesideNestedTransactionError: '... after that transaction set its role, session
 * authorization or search path (SET LOCAL ROLE)'), for Drizzle and for Kysely; the four
 * controls pass.
 *
 * Suggested fix: note the identity as the settings are noted, on the innermost savepoint it
 * was set in (`InnerSavepoint.setIdentity`): rolled back to, it ends; released, it passes to
 * the one around it (the outermost still keeps and puts back the role at its release).
 *
 * Fixed: the role is noted on the innermost savepoint it was set in
 * (`InnerSavepoint.setIdentity`): rolled back to, it ends; released, it passes to the one around
 * it.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { Kysely, PostgresDialect, sql as ksql } from 'kysely';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const notes = pgTable('adv74i_notes', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
  what: text('what').notNull(),
});

interface KyselyDb {
  adv74i_notes: { id?: number; tag: string; what: string };
}

let pool: Pool;
let db: NodePgDatabase;
let kdb: Kysely<KyselyDb>;
let role: string;

type Body74 = { tag: string; asUser?: boolean; kysely?: boolean };

/** The same with Kysely's savepoint API on a controlled transaction. */
async function workKysely(body: Body74) {
  const { tag } = body;
  const trx = await kdb.startTransaction().execute();
  await trx.insertInto('adv74i_notes').values({ tag, what: 'order' }).execute();
  const asUser = await trx.savepoint('as_user').execute();
  try {
    if (body.asUser) await ksql.raw(`SET LOCAL ROLE ${role}`).execute(asUser);
    await asUser.insertInto('adv74i_notes').values({ tag, what: 'theirs' }).execute();
    if (!body.asUser) throw new Error('not theirs');
  } catch {
    await asUser.rollbackToSavepoint('as_user').execute();
  }
  const shown = await ksql<{ who: string }>`SELECT current_user AS who`.execute(trx);
  const who = shown.rows[0].who === role ? 'user' : 'owner';
  await kdb.insertInto('adv74i_notes').values({ tag, what: 'audit' }).execute(); // the service's kdb
  await trx.commit().execute();
  return { tag, who };
}

async function work(body: Body74) {
  if (body.kysely) return workKysely(body);
  const { tag } = body;
  let who = '';
  await db.transaction(async (tx) => {
    await tx.insert(notes).values({ tag, what: 'order' });
    await tx
      .transaction(async (asUser) => {
        if (body.asUser) await asUser.execute(sql.raw(`SET LOCAL ROLE ${role}`));
        // The policy lets the user write only rows of 'mine': refused (42501) as the user.
        await asUser.insert(notes).values({ tag, what: 'theirs' });
        if (!body.asUser) asUser.rollback();
      })
      .catch(() => undefined);
    const shown = await tx.execute<{ who: string }>(sql`SELECT current_user AS who`);
    who = shown.rows[0].who === role ? 'user' : 'owner';
    await db.insert(notes).values({ tag, what: 'audit' }); // the service's own db
  });
  return { tag, who };
}

@Controller()
class NotesController {
  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return work(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return work(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('adversary 74: a role rolled back with its savepoint still refuses beside work', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv74_identity_rolled_back', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
        kdb = new Kysely<KyselyDb>({ dialect: new PostgresDialect({ pool: started }) });
      },
      setup: async (admin) => {
        const database = (await admin.query<{ db: string }>('SELECT current_database() AS db'))
          .rows[0].db;
        role = `adv74i_user_${database.slice(-8)}`;
        await admin.query(`
          CREATE ROLE ${role} NOLOGIN;
          CREATE TABLE adv74i_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);
          GRANT SELECT, INSERT ON adv74i_notes TO ${role};
          GRANT USAGE ON SEQUENCE adv74i_notes_id_seq TO ${role};
          ALTER TABLE adv74i_notes ENABLE ROW LEVEL SECURITY;
          CREATE POLICY mine ON adv74i_notes TO ${role} USING (true) WITH CHECK (what = 'mine');`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
    if (!role) return;
    const cluster = new Client({ connectionString: process.env.TEST_DATABASE_URL });
    await cluster.connect();
    await cluster.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
    await cluster.end();
  });

  const kept = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv74i_notes WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the user part refused and rolled back, both rows kept', async () => {
    const tag = 'plain';
    const answer = await post('/plain', undefined, { tag, asUser: true });
    expect(answer.status).toBe(201);
    expect(answer.body.who).toBe('owner');
    expect(await kept(tag)).toEqual(['audit', 'order']);
  }, 20_000);

  it('control: no SET LOCAL ROLE in the savepoint: 201, both rows', async () => {
    const tag = 'owner';
    const answer = await post('/keyed', tag, { tag });
    expect(answer.status).toBe(201);
    expect(await kept(tag)).toEqual(['audit', 'order']);
  }, 20_000);

  it('the SET LOCAL ROLE rolled back with its savepoint: the audit beside is kept, 201 (every try)', async () => {
    const tag = 'as-user';
    const answer = await post('/keyed', tag, { tag, asUser: true });
    // Received: 500, StatementBesideNestedTransactionError(true) from the audit's insert.
    expect({ status: answer.status, code: answer.body.code }).toEqual({
      status: 201,
      code: undefined,
    });
    expect(answer.body.who).toBe('owner');
    expect(await kept(tag)).toEqual(['audit', 'order']);
  }, 20_000);

  it('control (Kysely): no SET LOCAL ROLE in the savepoint: 201, both rows', async () => {
    const tag = 'k-owner';
    const answer = await post('/keyed', tag, { tag, kysely: true });
    expect(answer.status).toBe(201);
    expect(await kept(tag)).toEqual(['audit', 'order']);
  }, 20_000);

  it('control (Kysely): without @Idempotent(), the user part rolled back, both rows kept', async () => {
    const tag = 'k-plain';
    const answer = await post('/plain', undefined, { tag, asUser: true, kysely: true });
    expect(answer.status).toBe(201);
    expect(answer.body.who).toBe('owner');
    expect(await kept(tag)).toEqual(['audit', 'order']);
  }, 20_000);

  it('Kysely: the SET LOCAL ROLE rolled back with savepoint(): the audit beside is kept, 201', async () => {
    const tag = 'k-as-user';
    const answer = await post('/keyed', tag, { tag, asUser: true, kysely: true });
    // Received: 500, StatementBesideNestedTransactionError(true) from the audit's insert.
    expect({ status: answer.status, code: answer.body.code }).toEqual({
      status: 201,
      code: undefined,
    });
    expect(answer.body.who).toBe('owner');
    expect(await kept(tag)).toEqual(['audit', 'order']);
  }, 20_000);
});
