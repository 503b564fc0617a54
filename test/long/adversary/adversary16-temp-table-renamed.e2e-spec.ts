import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (Drizzle on the pool given to the library): a request handles two batches,
 * each in its own `db.transaction`. Each batch builds its picks in a staging temp table made
 * `ON COMMIT DROP` and, once it is complete, swaps it in under the name the rest of the batch
 * reads: `ALTER TABLE picks_staging RENAME TO picks` (the usual build-then-swap), then writes
 * its pick order from it. Without the library: 201 (the control below): the batch's COMMIT
 * drops the table (the ON COMMIT action belongs to the table, whatever its name now), so the
 * second batch builds and swaps again.
 *
 * What happens: the ON COMMIT DROP note is kept by the name the table was made with
 * (`picks_staging`); after the RENAME nothing of that name exists, so the nested COMMIT ends
 * nothing and `picks` outlives it. The second batch's RENAME fails 42P07 (relation "picks"
 * already exists): 500, nothing kept, on every retry.
 *
 * What should happen: 201 once, replayed, each batch's order written once.
 *
 * Why it matters: a correct program fails for ever. Low: renaming a temporary table is rare.
 */
let pool: Pool;
let db: NodePgDatabase;

async function batch(order: string) {
  await db.transaction(async (tx) => {
    await tx.execute(
      sql`CREATE TEMP TABLE picks_staging ON COMMIT DROP AS SELECT g AS bin FROM generate_series(1, 2) g`,
    );
    await tx.execute(sql`ALTER TABLE picks_staging RENAME TO picks`);
    await tx.execute(sql`INSERT INTO pick_orders (name) SELECT ${order} FROM picks WHERE bin = 1`);
  });
}

async function handle({ order }: { order: string }) {
  await batch(`${order}-1`);
  await batch(`${order}-2`);
  return { order };
}

@Controller()
class PicksController {
  @Post('plain')
  plain(@Body() body: { order: string }) {
    return handle(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { order: string }) {
    return handle(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PicksController],
})
class PicksModule {}

describe('adversary 16: a temporary table made ON COMMIT DROP, then renamed', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv16_temp_renamed', {
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

  const orders = async (prefix: string) =>
    (await fixture.admin.query('SELECT 1 FROM pick_orders WHERE name LIKE $1', [`${prefix}-%`]))
      .rows.length;

  const post = (path: string, order: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ order });
  };

  it('without the library (no @Idempotent): 201, both batches (control)', async () => {
    const answer = await post('/plain', 'a');
    expect({ status: answer.status, body: answer.body, orders: await orders('a') }).toEqual({
      status: 201,
      body: { order: 'a' },
      orders: 2,
    });
  }, 20_000);

  it('under @Idempotent(): 201 once, replayed, both batches written once', async () => {
    const first = await post('/idempotent', 'b', 'key-1');
    const retry = await post('/idempotent', 'b', 'key-1');
    // Observed: { first: 500, retry: 500, orders: 0 } (42P07: the renamed picks kept past the nested COMMIT).
    expect({
      first: first.status,
      body: first.body,
      retry: retry.status,
      same: retry.text === first.text,
      orders: await orders('b'),
    }).toEqual({
      first: 201,
      body: { order: 'b' },
      retry: 201,
      same: true,
      orders: 2,
    });
  }, 20_000);
});
