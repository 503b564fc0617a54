import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (Drizzle on the pool given to the library): a report endpoint stages its
 * rows in a temporary table made `ON COMMIT DROP` inside a Drizzle transaction, records the
 * report run, and declares a `WITH HOLD` cursor over the staged rows, which PostgreSQL
 * materializes at that transaction's COMMIT (before the table is dropped) so that the rows can
 * be fetched after it; it then fetches them and closes the cursor. Without the library: 201,
 * the rows answered.
 *
 * What happens: the nested COMMIT's ending (NestedCommit.endingText) closes only the cursors
 * not `WITH HOLD`, then runs `DROP TABLE pg_temp.report_rows CASCADE` while the holdable cursor
 * is still open over it (a savepoint's RELEASE does not materialize it, as a COMMIT does):
 * 55006 "cannot DROP TABLE … because it is being used by active queries in this session". The
 * request answers 500, nothing kept, on every retry.
 *
 * What should happen: 201 once, the answer replayed, the report run recorded once.
 *
 * Why it matters: a correct program (a holdable cursor is the documented way to read a
 * transaction's result after its COMMIT) fails for ever under @Idempotent(); the nested COMMIT
 * ends the tables as PostgreSQL does only for cursors that are not holdable.
 */
let pool: Pool;
let db: NodePgDatabase;

async function report({ name }: { name: string }) {
  await db.transaction(async (tx) => {
    await tx.execute(
      sql`CREATE TEMP TABLE report_rows ON COMMIT DROP AS SELECT g AS n FROM generate_series(1, 3) g`,
    );
    await tx.execute(sql`INSERT INTO report_runs (name) VALUES (${name})`);
    await tx.execute(
      sql`DECLARE report_cursor CURSOR WITH HOLD FOR SELECT n FROM report_rows ORDER BY n`,
    );
  });
  const { rows } = await db.execute<{ n: number }>(sql`FETCH ALL FROM report_cursor`);
  await db.execute(sql`CLOSE report_cursor`);
  return { name, rows: rows.map((row) => row.n) };
}

@Controller()
class ReportsController {
  @Post('plain')
  plain(@Body() body: { name: string }) {
    return report(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { name: string }) {
    return report(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReportsController],
})
class ReportsModule {}

describe('adversary 14: a WITH HOLD cursor over a temporary table ON COMMIT DROP, declared in a nested transaction', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv14_hold_cursor', {
      module: ReportsModule,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE report_runs (name text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const runs = async (name: string) =>
    (await fixture.admin.query('SELECT 1 FROM report_runs WHERE name = $1', [name])).rows.length;

  const post = (path: string, name: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ name });
  };

  it('without the library (no @Idempotent): 201 with the rows (control)', async () => {
    const answer = await post('/plain', 'a');
    expect({ status: answer.status, body: answer.body, runs: await runs('a') }).toEqual({
      status: 201,
      body: { name: 'a', rows: [1, 2, 3] },
      runs: 1,
    });
  }, 20_000);

  // A stated limit (docs/guides/transactions.md, what a nested COMMIT ends): PostgreSQL's
  // COMMIT copies a WITH HOLD cursor's rows out before it drops the table under it, which no
  // statement can do; the DROP then meets the open cursor (55006). Skipped, and said in issue
  // 27's note.
  it.skip('under @Idempotent(): 201 once, replayed, the run recorded once', async () => {
    const first = await post('/idempotent', 'b', 'key-1');
    const retry = await post('/idempotent', 'b', 'key-1');
    // Observed: { first: 500, retry: 500, runs: 0 } (55006 at the nested COMMIT's DROP TABLE).
    expect({
      first: first.status,
      body: first.body,
      retry: retry.status,
      same: retry.text === first.text,
      runs: await runs('b'),
    }).toEqual({
      first: 201,
      body: { name: 'b', rows: [1, 2, 3] },
      retry: 201,
      same: true,
      runs: 1,
    });
  }, 20_000);
});
