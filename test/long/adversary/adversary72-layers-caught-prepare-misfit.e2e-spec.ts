/**
 * Adversary 72: a handler that prepares its SQL-level statement lazily, the way pooled-`pg`
 * code often does (`EXECUTE report_q(...)`; on "prepared statement does not exist" (26000),
 * `PREPARE report_q ...` and `EXECUTE` again), is answered 500 `store_misconfigured`: "The
 * idempotency store cannot run on its database connection as configured ... Retrying will not
 * help until the server is reconfigured", and the library logs at ERROR that the connection
 * "shares its sessions between transactions, as a pooler in transaction mode does ... Set
 * pooler: 'transaction'". There is no pooler; the failure is the handler's own caught
 * statement, which aborted the request's transaction: the documented answer is 500
 * `transaction_aborted`, which says what to change (catch it in a nested transaction). The
 * same for a `PREPARE` that meets its name already there (42P05) and is caught.
 *
 * Why: `classified()` in lib/transaction/failure.ts turns a `TransactionAbortedError` into
 * `databaseFailure(error.cause)` first, and its cause is the handler's caught error
 * (`lastError`); `misconfigured()` (lib/connection/pooler-misfit.ts) reads any 26000 / 42P05
 * whose message begins "prepared statement" as the library's own named statements lost to a
 * pooler, whoever sent it.
 *
 * Expected (docs/guides/data-layers.md): "A failed statement that the handler catches and
 * goes on from aborts the transaction in PostgreSQL: the request answers 500
 * `transaction_aborted`, nothing stored, nothing committed." docs/reference/problems.md keeps
 * `store_misconfigured` for "the database connection cannot keep the library's prepared
 * statements", whose remedy is for the operator to set `pooler: 'transaction'`.
 *
 * Control: the same handler catching a missing table (42P01) instead: 500 `transaction_aborted`.
 *
 * Severity: low (nothing stored or committed either way, the retry runs again as it should;
 * but the client is told not to retry, and the operator is told to reconfigure a pooler that
 * is not there, while the handler's own bug goes unnamed).
 *
 * Fails now: 'Expected "transaction_aborted", Received "store_misconfigured"' for the caught
 * 26000 and the caught 42P05 (the control passes).
 *
 * Fixed: a misfit is the library's own statements only (`explainPoolerMisfit` reads the name
 * PostgreSQL gives, `idempotency_…`); the app's own prepared statement is its failure.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
let db: NodePgDatabase;

type Body72 = { tag: string; probe: 'execute' | 'prepare-twice' | 'missing-table' };

@Controller()
class ReportsController {
  @Post('reports')
  @Idempotent()
  async report(@Body() body: Body72) {
    await db.execute(sql`INSERT INTO adv72p_reports (tag) VALUES (${body.tag})`);
    const probe = {
      // The lazy-prepare recipe: EXECUTE, and PREPARE on "does not exist".
      execute: 'EXECUTE adv72p_count',
      'prepare-twice': 'PREPARE adv72p_twice AS SELECT 1; PREPARE adv72p_twice AS SELECT 1',
      'missing-table': 'SELECT count(*) FROM adv72p_missing',
    }[body.probe];
    try {
      await db.execute(sql.raw(probe));
    } catch {
      // Prepared (or looked up) afterwards: what the handler meant is done either way.
    }
    return { tag: body.tag };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReportsController],
})
class ReportsModule {}

describe('adversary 72: a caught statement of prepared-statement SQLSTATE', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv72_caught_prepare', {
      module: ReportsModule,
      max: 2,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv72p_reports (tag text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  it.each<[string, Body72['probe']]>([
    ['control: a caught missing table (42P01)', 'missing-table'],
    ['a caught EXECUTE of a statement not prepared yet (26000)', 'execute'],
    ['a caught PREPARE of a name already there (42P05)', 'prepare-twice'],
  ])(
    '%s: 500 transaction_aborted, nothing kept',
    async (_name, probe) => {
      const tag = `adv72p-${probe}`;
      const answer = await request(fixture.app.getHttpServer())
        .post('/reports')
        .set('Idempotency-Key', tag)
        .send({ tag, probe });
      expect(answer.status).toBe(500);
      // Received for 26000 and 42P05: 'store_misconfigured' (and an ERROR log blaming a pooler).
      expect((answer.body as { code?: string }).code).toBe('transaction_aborted');
      const { rows } = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM adv72p_reports WHERE tag = $1',
        [tag],
      );
      expect(rows[0].n).toBe(0);
    },
    20_000,
  );
});
