import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): reads
 * through a database function that returns a named refcursor, the usual way such functions
 * are used (PostgreSQL's docs, "Returning Cursors"): in a transaction,
 * `SELECT open_lines('lines_cur', account)` then `FETCH ALL IN lines_cur`, and books an
 * invoice from what it fetched; one Drizzle transaction per account. PostgreSQL closes the
 * cursor at the transaction's COMMIT (it is not WITH HOLD), so the next account's
 * transaction opens `lines_cur` again: without the library, 201.
 *
 * What happens: round 10 closes a nested transaction's cursors at its COMMIT only when the
 * statement the data layer sent is itself a `DECLARE`; a cursor a function opens (PL/pgSQL
 * `OPEN`) is not seen. Inside a request the RELEASE keeps it open, and the second account's
 * `open_lines('lines_cur', …)` meets it: 42P03 "cursor "lines_cur" already in use", 500, kept
 * as the key's answer and replayed to every retry.
 *
 * What should happen: as without the library: each cursor closed at its transaction's COMMIT;
 * 201 once, one invoice per account.
 */
let db: NodePgDatabase;

async function invoice({ run, accounts }: { run: string; accounts: string[] }) {
  for (const account of accounts) {
    await db.transaction(async (tx) => {
      await tx.execute(sql`SELECT open_lines('lines_cur', ${account})`).catch((error: unknown) => {
        if (process.env.ADV_DEBUG) console.log((error as { cause?: unknown }).cause ?? error);
        throw error;
      });
      const { rows } = await tx.execute<{ amount: number }>(sql`FETCH ALL IN lines_cur`);
      const total = rows.reduce((sum, row) => sum + Number(row.amount), 0);
      await tx.execute(
        sql`INSERT INTO invoices (run, account, total) VALUES (${run}, ${account}, ${total})`,
      );
    });
  }
  return { run, invoiced: accounts.length };
}

@Controller()
class InvoicesController {
  @Post('plain')
  plain(@Body() body: { run: string; accounts: string[] }) {
    return invoice(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { run: string; accounts: string[] }) {
    return invoice(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [InvoicesController],
})
class InvoicesModule {}

let pool: Pool;
const poolOf = () => pool;

describe('adversary 11: a refcursor a function opens in a nested transaction outlives its COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv11_refcursor_function', {
      module: InvoicesModule,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE lines (account text NOT NULL, amount int NOT NULL);
          INSERT INTO lines VALUES ('acc-1', 10), ('acc-1', 5), ('acc-2', 7);
          CREATE TABLE invoices (run text NOT NULL, account text NOT NULL, total int NOT NULL);
          CREATE FUNCTION open_lines(c refcursor, p_account text) RETURNS refcursor
          LANGUAGE plpgsql AS $$
          BEGIN
            OPEN c FOR SELECT amount FROM lines WHERE account = p_account;
            RETURN c;
          END $$;
        `);
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, run: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({
      run,
      accounts: ['acc-1', 'acc-2'],
    });
  };

  const invoicesOf = async (run: string) => {
    const { rows } = await fixture.admin.query<{ account: string; total: number }>(
      'SELECT account, total FROM invoices WHERE run = $1 ORDER BY account',
      [run],
    );
    return rows;
  };

  it('without the library (no @Idempotent): 201, one invoice per account (control)', async () => {
    const answer = await post('/plain', 'plain');
    expect(answer.status).toBe(201);
    expect(await invoicesOf('plain')).toEqual([
      { account: 'acc-1', total: 15 },
      { account: 'acc-2', total: 7 },
    ]);
  }, 30_000);

  it('under @Idempotent(): 201 once, one invoice per account', async () => {
    const answers: { status: number; body: unknown }[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = await post('/idempotent', 'run-1', 'key-1');
      answers.push({ status: answer.status, body: answer.body });
      if (answer.status < 500) break;
    }
    expect({ answers, invoices: await invoicesOf('run-1') }).toEqual({
      answers: [{ status: 201, body: { run: 'run-1', invoiced: 2 } }],
      invoices: [
        { account: 'acc-1', total: 15 },
        { account: 'acc-2', total: 7 },
      ],
    });
  }, 30_000);
});
