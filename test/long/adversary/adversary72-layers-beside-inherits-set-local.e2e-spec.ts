/**
 * Adversary 72: a statement sent beside a nested transaction (a service writing with the
 * injected `db` inside `db.transaction()`'s callback) runs under the settings that nested
 * transaction set for itself with `SET LOCAL` / `set_config(…, true)`, where without the
 * library it runs on a connection of its own with the session's. The docs' own example, a
 * nested transaction bounded with `SET LOCAL statement_timeout = '200ms'`, cancels the
 * service's 400 ms statement beside it: 503 `database_transient` ("a passing reason ...
 * Retry with the same key"), and every retry meets the same 503, forever. A tenant set with
 * `set_config('app.tenant', …, true)` (the row-level-security recipe without roles) is the
 * beside write's too: its row is stamped with the nested transaction's tenant.
 *
 *   await db.transaction(async (tx) => {
 *     await tx.execute(sql`SET LOCAL statement_timeout = '200ms'`); // bound this step
 *     await tx.insert(notes).values({ tag, what: 'order' });
 *     await db.execute(sql`INSERT ... FROM pg_sleep(0.4)`);      // the search service's db
 *   });
 *
 * Why: on the request's one connection a beside statement runs inside the open savepoint
 * with whatever its code set; `PoolTransaction.refuseBesideIdentity`
 * (lib/data-layers/pool-transaction.ts) refuses a beside statement only once the nested
 * transaction set its role, session authorization or search path (`setIdentity`, from
 * `setsIdentity`) or began READ ONLY; the other settings it notes (`NestedCommit`,
 * `localSettingsOf`) are only put back at its commit, never kept from the statements beside it.
 *
 * Expected (docs/guides/transactions.md): the handler may set "any other setting its code
 * sets for the transaction inside it (`SET LOCAL statement_timeout = '300ms'` for one bounded
 * step, `set_config('app.tenant', …, true)` for row-level security)" and it ends with that
 * nested transaction "as Drizzle, Kysely, Prisma and TypeORM code expects"; data-layers.md: a
 * beside statement that would run under the nested transaction's identity is refused "rather
 * than run as another role in silence". So: the beside statement runs with the request's own
 * settings (201, both rows, no tenant on the audit), or is refused with
 * `StatementBesideNestedTransactionError` as for a role; not a 503 that tells the client to
 * retry what can never pass, nor a row stamped with another tenant.
 *
 * Control: the same code without the `SET LOCAL` (201, both rows), and the same beside write
 * after the nested transaction committed (no tenant).
 *
 * Severity: medium (a request that can never succeed while told its failure is passing; a
 * beside write carrying the nested transaction's tenant; nothing is run twice).
 *
 * Fails now: statement_timeout: 'Expected { attempt: 1, status: 201, code: undefined },
 * Received { attempt: 1, status: 503, code: "database_transient" }'; tenant: 'Expected [""],
 * Received ["acme"]' (both controls pass).
 *
 * Fixed: refused, as beside a role (the statement cannot run inside the nested transaction
 * without its settings, on the request's one connection): a nested transaction that sets a
 * setting for itself is noted (`localSettings`, lib/data-layers/pool-transaction.ts), and a
 * statement beside it is refused with StatementBesideNestedTransactionError('settings'),
 * thrown to the handler as for a role: its 500, nothing kept. The tests now ask that refusal
 * (they asked 201).
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const notes = pgTable('adv72s_notes', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
  what: text('what').notNull(),
});

let pool: Pool;
let db: NodePgDatabase;

type Body72 = { tag: string; bound?: boolean; tenant?: 'inside' | 'after' };

@Controller()
class NotesController {
  @Post('bounded')
  @Idempotent()
  async bounded(@Body() body: Body72) {
    const { tag } = body;
    await db.transaction(async (tx) => {
      if (body.bound) await tx.execute(sql`SET LOCAL statement_timeout = '200ms'`);
      await tx.insert(notes).values({ tag, what: 'order' });
      // The search service's own db: a statement of 400 ms.
      await db.execute(sql`INSERT INTO adv72s_notes (tag, what)
        SELECT ${tag}, 'index' FROM pg_sleep(0.4)`);
    });
    return { tag };
  }

  @Post('tenant')
  @Idempotent()
  async tenant(@Body() body: Body72) {
    const { tag } = body;
    const audit = () => db.execute(sql`INSERT INTO adv72s_audit (tag) VALUES (${tag})`);
    await db.transaction(async (tx) => {
      await tx.execute(sql`SELECT set_config('app.tenant', 'acme', true)`);
      await tx.insert(notes).values({ tag, what: 'order' });
      if (body.tenant === 'inside') await audit(); // the audit service's own db, beside
    });
    if (body.tenant === 'after') await audit();
    return { tag };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

interface Problem {
  code?: string;
}

/**
 * The refusal, thrown to the handler as for a statement beside a nested transaction that set
 * its role (test/beside-nested-role): its 500, stored and replayed, nothing of it committed.
 */
const REFUSED = { status: 500, code: undefined };

describe('adversary 72: a statement beside a nested transaction runs under its SET LOCAL', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv72_beside_set_local', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query(`CREATE TABLE adv72s_notes (
            id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);
          CREATE TABLE adv72s_audit (
            tag text NOT NULL, tenant text DEFAULT coalesce(current_setting('app.tenant', true), ''))`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv72s_notes WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string, body: Body72) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);

  it.each<[string, boolean]>([
    ['control: no SET LOCAL', false],
    ['SET LOCAL statement_timeout in the nested transaction', true],
  ])(
    '%s: the slow statement beside it runs with the request’s own timeout: 201, both rows',
    async (_name, bound) => {
      const tag = `adv72s-bound-${String(bound)}`;
      for (let attempt = 1; attempt <= 2; attempt++) {
        const answer = await post('/bounded', tag, { tag, bound });
        // Received with the SET LOCAL: 503 database_transient, on every attempt.
        const seen = { attempt, status: answer.status, code: (answer.body as Problem).code };
        if (bound) expect(seen).toEqual({ attempt, ...REFUSED });
        else expect(seen).toEqual({ attempt, status: 201, code: undefined });
      }
      // Refused: nothing kept (never the order without its index, nor a 503 for ever).
      expect(await kept(tag)).toEqual(bound ? [] : ['index', 'order']);
    },
    20_000,
  );

  it.each<[string, 'after' | 'inside']>([
    ['control: the audit after the nested transaction committed', 'after'],
    ['the audit beside the nested transaction', 'inside'],
  ])(
    '%s: the audit row carries no tenant (the nested transaction’s set_config is its own)',
    async (_name, tenant) => {
      const tag = `adv72s-tenant-${tenant}`;
      const answer = await post('/tenant', tag, { tag, tenant });
      const { rows } = await fixture.admin.query<{ tenant: string }>(
        'SELECT tenant FROM adv72s_audit WHERE tag = $1',
        [tag],
      );
      // Received beside: 201, the audit stamped 'acme'. Refused now: nothing kept.
      if (tenant === 'inside') {
        expect({ status: answer.status, code: (answer.body as Problem).code }).toEqual(REFUSED);
        expect(rows).toEqual([]);
      } else {
        expect(answer.status).toBe(201);
        expect(rows.map((row) => row.tenant)).toEqual(['']);
      }
    },
    20_000,
  );
});
