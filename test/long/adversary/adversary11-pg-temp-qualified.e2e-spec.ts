import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): books a
 * batch of payments, one Drizzle transaction per payment, each staging its payment in a
 * temporary table it names in the temporary schema, `CREATE TABLE pg_temp.staging (…) ON
 * COMMIT DROP` (PostgreSQL's documented way to make a table temporary by its schema: the
 * table is temporary, `relpersistence = 't'`, and dropped at the COMMIT).
 *
 * What happens: round 10 drops such tables at a nested transaction's COMMIT only when the
 * statement says `TEMP`/`TEMPORARY`; the schema-qualified form is not seen (the parser's
 * relpersistence is 'p' until PostgreSQL looks the schema up). Inside a request the second
 * payment's `CREATE TABLE pg_temp.staging` meets the first's table (42P07 "already exists"):
 * 500, kept as the key's answer and replayed to every retry.
 *
 * What should happen: as without the library: the table dropped at each COMMIT; 201 once,
 * one ledger row per payment.
 */
let db: NodePgDatabase;

type Batch = { batch: string; payments: string[] };

async function book({ batch, payments }: Batch) {
  for (const payment of payments) {
    await db.transaction(async (tx) => {
      await tx
        .execute(sql`CREATE TABLE pg_temp.staging (batch text, payment text) ON COMMIT DROP`)
        .catch((error: unknown) => {
          if (process.env.ADV_DEBUG)
            console.log(String(error), (error as { cause?: unknown }).cause);
          throw error;
        });
      await tx.execute(sql`INSERT INTO pg_temp.staging VALUES (${batch}, ${payment})`);
      await tx.execute(
        sql`INSERT INTO ledger (batch, payment) SELECT batch, payment FROM pg_temp.staging`,
      );
    });
  }
  return { batch, booked: payments.length };
}

@Controller()
class BookingsController {
  @Post('plain')
  plain(@Body() body: Batch) {
    return book(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: Batch) {
    return book(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [BookingsController],
})
class BookingsModule {}

let pool: Pool;
const poolOf = () => pool;

describe('adversary 11: a table made ON COMMIT DROP in pg_temp (no TEMP word) outlives a nested COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv11_pg_temp_qualified', {
      module: BookingsModule,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
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

  it('without the library (no @Idempotent): 201, one ledger row per payment (control)', async () => {
    const answer = await post('/plain', 'plain');
    expect(answer.status).toBe(201);
    expect(await ledgerOf('plain')).toEqual(['pay-1', 'pay-2']);
  }, 30_000);

  it('under @Idempotent(): 201 once, one ledger row per payment', async () => {
    const answers: { status: number; body: unknown }[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = await post('/idempotent', 'batch', 'key-1');
      answers.push({ status: answer.status, body: answer.body });
      if (answer.status < 500) break;
    }
    expect({ answers, ledger: await ledgerOf('batch') }).toEqual({
      answers: [{ status: 201, body: { batch: 'batch', booked: 2 } }],
      ledger: ['pay-1', 'pay-2'],
    });
  }, 30_000);
});
