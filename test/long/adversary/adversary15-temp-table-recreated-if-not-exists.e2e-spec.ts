import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (Drizzle on the pool given to the library): as adversary 14's
 * temp-table-recreated-kept, but written the defensive way scripts often are: inside a Drizzle
 * transaction a helper stages rows in `CREATE TEMP TABLE picks … ON COMMIT DROP`; the code
 * after it keeps the picks for the rest of the request with `DROP TABLE IF EXISTS picks` and
 * `CREATE TEMP TABLE IF NOT EXISTS picks AS …` (no ON COMMIT: kept to the session's end), then,
 * after the transaction, reads the picks and drops the table. Without the library: 201 with the
 * picks (the control below).
 *
 * What happens: round 14's fix ('keep') forgets the ON COMMIT DROP note only for a plain
 * `CREATE TEMP TABLE`; `IF NOT EXISTS` is read as "the existing one's action stands", but the
 * DROP just before means nothing existed: a new table, made without ON COMMIT. The note still
 * says drop, the nested COMMIT's ending drops the table made to be kept, and the read after it
 * fails 42P01: 500, nothing kept, on every retry.
 *
 * The same with `SELECT bin INTO TEMP picks FROM kept_picks` (PostgreSQL's other way to make
 * a table from a query, no ON COMMIT either): commitEndsOf notes nothing for it, same 500.
 *
 * What should happen: 201 once, replayed, the pick order written once (a real COMMIT ends only
 * the table that exists with ON COMMIT DROP at that moment, and this one has none).
 *
 * Why it matters: a correct program fails for ever; `IF EXISTS`/`IF NOT EXISTS` are the usual
 * spelling of such DDL. Low: re-making a temporary table under one name in one transaction is
 * unusual.
 */
let pool: Pool;
let db: NodePgDatabase;

async function pick({ order }: { order: string }, selectInto = false) {
  await db.transaction(async (tx) => {
    await tx.execute(
      sql`CREATE TEMP TABLE picks ON COMMIT DROP AS SELECT g AS bin FROM generate_series(1, 2) g`,
    );
    await tx.execute(sql`INSERT INTO pick_orders (name) VALUES (${order})`);
    // Kept for the request: made again without ON COMMIT.
    await tx.execute(sql`CREATE TEMP TABLE kept_picks AS SELECT bin FROM picks`);
    await tx.execute(sql`DROP TABLE IF EXISTS picks`);
    await tx.execute(
      selectInto
        ? sql`SELECT bin INTO TEMP picks FROM kept_picks`
        : sql`CREATE TEMP TABLE IF NOT EXISTS picks AS SELECT bin FROM kept_picks`,
    );
    await tx.execute(sql`DROP TABLE kept_picks`);
  });
  const { rows } = await db.execute<{ bin: number }>(sql`SELECT bin FROM picks ORDER BY bin`);
  await db.execute(sql`DROP TABLE picks`);
  return { order, bins: rows.map((row) => row.bin) };
}

@Controller()
class PicksController {
  @Post('plain')
  plain(@Body() body: { order: string }) {
    return pick(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { order: string }) {
    return pick(body);
  }

  @Post('select-into')
  @Idempotent()
  selectInto(@Body() body: { order: string }) {
    return pick(body, true);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PicksController],
})
class PicksModule {}

describe('adversary 15: a temporary table dropped and made again IF NOT EXISTS without ON COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv15_temp_if_not_exists', {
      module: PicksModule,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE pick_orders (name text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const orders = async (name: string) =>
    (await fixture.admin.query('SELECT 1 FROM pick_orders WHERE name = $1', [name])).rows.length;

  const post = (path: string, order: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ order });
  };

  it('without the library (no @Idempotent): 201 with the picks (control)', async () => {
    const answer = await post('/plain', 'a');
    expect({ status: answer.status, body: answer.body, orders: await orders('a') }).toEqual({
      status: 201,
      body: { order: 'a', bins: [1, 2] },
      orders: 1,
    });
  }, 20_000);

  it('under @Idempotent(): 201 once, replayed, the order written once', async () => {
    const first = await post('/idempotent', 'b', 'key-1');
    const retry = await post('/idempotent', 'b', 'key-1');
    // Observed: { first: 500, retry: 500, orders: 0 } (42P01: picks dropped at the nested COMMIT).
    expect({
      first: first.status,
      body: first.body,
      retry: retry.status,
      same: retry.text === first.text,
      orders: await orders('b'),
    }).toEqual({
      first: 201,
      body: { order: 'b', bins: [1, 2] },
      retry: 201,
      same: true,
      orders: 1,
    });
  }, 20_000);

  it('SELECT … INTO TEMP: 201 once, replayed, the order written once', async () => {
    const first = await post('/select-into', 'c', 'key-2');
    const retry = await post('/select-into', 'c', 'key-2');
    expect({
      first: first.status,
      body: first.body,
      retry: retry.status,
      same: retry.text === first.text,
      orders: await orders('c'),
    }).toEqual({
      first: 201,
      body: { order: 'c', bins: [1, 2] },
      retry: 201,
      same: true,
      orders: 1,
    });
  }, 20_000);
});
