import { Body, Controller, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Kysely on the pool given to the library, docs/guides/kysely.md): imports a
 * batch of payments in chunks, each chunk in a transaction of its own that stages its rows in
 * a temporary table and moves them into the ledger with one statement (the usual staging
 * recipe for a bulk upsert). PostgreSQL empties or drops such a table at the COMMIT of the
 * transaction: `ON COMMIT DELETE ROWS` (the table made once per session, `IF NOT EXISTS`) or
 * `ON COMMIT DROP` (made in each chunk's transaction).
 *
 * What happens: inside a request each chunk's transaction is a savepoint, and its `RELEASE
 * SAVEPOINT` is no COMMIT: the temporary table keeps its rows, or is not dropped, until the
 * request's own COMMIT. With `ON COMMIT DELETE ROWS` the second chunk moves the first chunk's
 * rows into the ledger again: 201, and three ledger rows for a batch of two payments (the
 * first payment booked twice). With `ON COMMIT DROP` the second chunk's `CREATE TEMP TABLE`
 * meets the first chunk's table (42P07 "already exists"): 500, kept as the key's answer and
 * replayed to every retry.
 *
 * What should happen: as without the library: each chunk's table emptied (or dropped) at its
 * COMMIT; 201 once, one ledger row per payment.
 */
let db: Kysely<any>; // eslint-disable-line @typescript-eslint/no-explicit-any

type Batch = { batch: string; payments: string[] };

/** `ON COMMIT DELETE ROWS`: the staging table made once per session, emptied at each commit. */
async function importEmptied({ batch, payments }: Batch) {
  for (const payment of payments) {
    await db.transaction().execute(async (trx) => {
      await sql`CREATE TEMP TABLE IF NOT EXISTS staging_rows (batch text, payment text)
        ON COMMIT DELETE ROWS`.execute(trx);
      await sql`INSERT INTO staging_rows VALUES (${batch}, ${payment})`.execute(trx);
      await sql`INSERT INTO ledger (batch, payment) SELECT batch, payment FROM staging_rows`.execute(
        trx,
      );
    });
  }
  return { batch, imported: payments.length };
}

/** `ON COMMIT DROP`: the staging table made in each chunk's transaction. */
async function importDropped({ batch, payments }: Batch) {
  for (const payment of payments) {
    await db.transaction().execute(async (trx) => {
      await sql`CREATE TEMP TABLE staging_dropped (batch text, payment text)
        ON COMMIT DROP`.execute(trx);
      await sql`INSERT INTO staging_dropped VALUES (${batch}, ${payment})`.execute(trx);
      await sql`INSERT INTO ledger (batch, payment) SELECT batch, payment FROM staging_dropped`.execute(
        trx,
      );
    });
  }
  return { batch, imported: payments.length };
}

@Controller()
class ImportsController {
  @Post('plain/emptied')
  plainEmptied(@Body() body: Batch) {
    return importEmptied(body);
  }

  @Post('plain/dropped')
  plainDropped(@Body() body: Batch) {
    return importDropped(body);
  }

  @Post('idempotent/emptied')
  @Idempotent()
  idempotentEmptied(@Body() body: Batch) {
    return importEmptied(body);
  }

  @Post('idempotent/dropped')
  @Idempotent()
  idempotentDropped(@Body() body: Batch) {
    return importDropped(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [ImportsController],
})
class ImportsModule {}

let pool: Pool;
const poolOf = () => pool;

describe('adversary 10: a temporary table ON COMMIT of a nested transaction lasts to the request’s commit', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv10_temp_on_commit', {
      module: ImportsModule,
      usePool: (started) => {
        pool = started;
        db = new Kysely({ dialect: new PostgresDialect({ pool: started }) });
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE ledger (batch text NOT NULL, payment text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, batch: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({
      batch,
      payments: ['pay-1', 'pay-2'],
    });
  };

  const ledgerOf = async (batch: string) => {
    const { rows } = await fixture.admin.query<{ payment: string }>(
      'SELECT payment FROM ledger WHERE batch = $1 ORDER BY payment',
      [batch],
    );
    return rows.map((row) => row.payment);
  };

  it.each(['emptied', 'dropped'])(
    'without the library (no @Idempotent), %s: 201, one ledger row per payment (control)',
    async (how) => {
      const answer = await post(`/plain/${how}`, `plain-${how}`);
      expect(answer.status).toBe(201);
      expect(await ledgerOf(`plain-${how}`)).toEqual(['pay-1', 'pay-2']);
    },
    30_000,
  );

  it.each(['emptied', 'dropped'])(
    'under @Idempotent(), %s: 201 once, one ledger row per payment',
    async (how) => {
      const answers: { status: number; code?: string }[] = [];
      for (let attempt = 0; attempt < 3; attempt++) {
        const answer = await post(`/idempotent/${how}`, `batch-${how}`, `key-${how}`);
        answers.push({ status: answer.status, code: (answer.body as { code?: string }).code });
        if (answer.status < 500) break;
      }
      expect({ answers, ledger: await ledgerOf(`batch-${how}`) }).toEqual({
        answers: [{ status: 201, code: undefined }],
        ledger: ['pay-1', 'pay-2'],
      });
    },
    30_000,
  );
});
