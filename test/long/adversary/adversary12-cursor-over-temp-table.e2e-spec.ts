import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): settles
 * a batch in one Drizzle transaction: stages the batch's payments in a temporary table made
 * `ON COMMIT DROP` (or, made once per session with `IF NOT EXISTS`, `ON COMMIT DELETE ROWS`),
 * declares a cursor over it and FETCHes it 2 rows at a time until it is empty, posting each
 * row to the ledger, and commits. The cursor is left to the COMMIT to close, as PostgreSQL's
 * docs say it does (a cursor not WITH HOLD ends with its transaction). PostgreSQL's COMMIT
 * closes the cursors first (PreCommit_Portals) and only then drops or empties the ON COMMIT
 * tables: without the library, 201.
 *
 * What happens: the ending the library sends after the nested transaction's RELEASE drops
 * (`DROP TABLE … CASCADE`) or empties (`TRUNCATE`) the temporary tables first and closes the
 * cursors after, in one DO block: the cursor, still open on the table, makes the DROP fail with
 * 55006 "cannot DROP TABLE "pay_stage" because it is being used by active queries in this
 * session" (TRUNCATE likewise). The nested COMMIT fails (the RELEASE already done, Drizzle's
 * ROLLBACK after it meets a savepoint that is gone): 500, kept as the key's answer and
 * replayed, the batch never settled.
 *
 * What should happen: as PostgreSQL's COMMIT: the cursors closed, then the tables ended; 201
 * once, the batch settled once.
 *
 * Why it matters: batch code that stages rows in a temporary table and walks them with a
 * cursor is ordinary, and leaving the cursor to the COMMIT is what the docs allow; here such a
 * request can never succeed under @Idempotent().
 */
let db: NodePgDatabase;
let pool: Pool;

type Batch = { batch: string; how: 'dropped' | 'emptied'; amounts: number[] };

async function settle({ batch, how, amounts }: Batch) {
  const stage = how === 'dropped' ? 'pay_stage' : 'pay_stage_e';
  await db
    .transaction(async (tx) => {
      if (how === 'dropped') {
        await tx.execute(sql`CREATE TEMP TABLE pay_stage (amount int NOT NULL) ON COMMIT DROP`);
      } else {
        await tx.execute(
          sql`CREATE TEMP TABLE IF NOT EXISTS pay_stage_e (amount int NOT NULL) ON COMMIT DELETE ROWS`,
        );
      }
      for (const amount of amounts) {
        await tx.execute(sql`INSERT INTO ${sql.identifier(stage)} VALUES (${amount})`);
      }
      await tx.execute(sql.raw(`DECLARE pay_cur CURSOR FOR SELECT amount FROM ${stage}`));
      for (;;) {
        const { rows } = await tx.execute<{ amount: number }>(sql`FETCH 2 FROM pay_cur`);
        if (rows.length === 0) break;
        for (const { amount } of rows) {
          await tx.execute(sql`INSERT INTO ledger (batch, amount) VALUES (${batch}, ${amount})`);
        }
      }
      // No CLOSE: the COMMIT closes the cursor.
    })
    .catch((error: unknown) => {
      if (process.env.ADV_DEBUG) console.log((error as { cause?: unknown }).cause ?? error);
      throw error;
    });
  return { batch, settled: amounts.length };
}

@Controller()
class SettleController {
  @Post('plain')
  plain(@Body() body: Batch) {
    return settle(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: Batch) {
    return settle(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [SettleController],
})
class SettleModule {}

describe('adversary 12: a cursor left open over an ON COMMIT temporary table fails the nested COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv12_cursor_temp', {
      module: SettleModule,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE ledger (batch text NOT NULL, amount int NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, body: Batch, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send(body);
  };

  const ledgerOf = async (batch: string) => {
    const { rows } = await fixture.admin.query<{ amount: number }>(
      'SELECT amount FROM ledger WHERE batch = $1 ORDER BY amount',
      [batch],
    );
    return rows.map((row) => row.amount);
  };

  it.each(['dropped', 'emptied'] as const)(
    'without the library (no @Idempotent), %s: 201, the batch settled (control)',
    async (how) => {
      const answer = await post('/plain', { batch: `plain-${how}`, how, amounts: [1, 2, 3] });
      expect(answer.status).toBe(201);
      expect(await ledgerOf(`plain-${how}`)).toEqual([1, 2, 3]);
    },
    20_000,
  );

  it.each(['dropped', 'emptied'] as const)(
    'under @Idempotent(), %s: 201 once, the batch settled once',
    async (how) => {
      const body: Batch = { batch: `batch-${how}`, how, amounts: [1, 2, 3] };
      const answers: { status: number; body: unknown }[] = [];
      for (let attempt = 0; attempt < 3; attempt++) {
        const answer = await post('/idempotent', body, `key-${how}`);
        answers.push({ status: answer.status, body: answer.body });
        if (answer.status < 500) break;
      }
      expect({ answers, ledger: await ledgerOf(`batch-${how}`) }).toEqual({
        answers: [{ status: 201, body: { batch: `batch-${how}`, settled: 3 } }],
        ledger: [1, 2, 3],
      });
    },
    20_000,
  );
});
