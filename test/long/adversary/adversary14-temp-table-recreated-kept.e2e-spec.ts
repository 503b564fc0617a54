import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (Drizzle on the pool given to the library): inside a Drizzle transaction a
 * helper stages rows in `CREATE TEMP TABLE picks … ON COMMIT DROP`; the code after it decides
 * to keep the picks for the rest of the request, so it drops that table and makes it again
 * without `ON COMMIT` (kept to the session's end, as PostgreSQL documents), then, after the
 * transaction, reads the picks and drops the table itself. Without the library: 201 with the
 * picks.
 *
 * What happens: NestedCommit notes `picks` as ON COMMIT DROP at the first CREATE and never
 * forgets it: the later `DROP TABLE` and the plain `CREATE TEMP TABLE picks` do not change the
 * note, so the nested COMMIT's ending drops the table the code made to be kept. The read after
 * it fails, 42P01 "relation picks does not exist": 500, nothing kept, on every retry.
 *
 * What should happen: 201 once, replayed, the pick order written once (a real COMMIT ends only
 * the table that exists with ON COMMIT DROP at that moment).
 *
 * Why it matters: the nested COMMIT ends a table by its name as first made, not by what the
 * transaction left; a correct program fails for ever. Low: dropping and re-making a temporary
 * table under one name inside one transaction is unusual.
 */
let pool: Pool;
let db: NodePgDatabase;

async function pick({ order }: { order: string }) {
  await db.transaction(async (tx) => {
    await tx.execute(
      sql`CREATE TEMP TABLE picks ON COMMIT DROP AS SELECT g AS bin FROM generate_series(1, 2) g`,
    );
    await tx.execute(sql`INSERT INTO pick_orders (name) VALUES (${order})`);
    // Kept for the request: made again without ON COMMIT.
    await tx.execute(sql`CREATE TEMP TABLE kept_picks AS SELECT bin FROM picks`);
    await tx.execute(sql`DROP TABLE picks`);
    await tx.execute(sql`CREATE TEMP TABLE picks AS SELECT bin FROM kept_picks`);
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
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PicksController],
})
class PicksModule {}

describe('adversary 14: a temporary table dropped and made again without ON COMMIT in a nested transaction', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv14_temp_recreated', {
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
});
