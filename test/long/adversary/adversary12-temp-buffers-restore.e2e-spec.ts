import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): an
 * import stages its rows in a temporary table `ON COMMIT DROP` inside one Drizzle
 * transaction, and first raises that transaction's temporary buffers, the usual tuning for
 * temp-table work (`SET LOCAL temp_buffers = '32MB'`, before the session's first temporary
 * table). PostgreSQL's COMMIT puts the setting back without checking it again (AtEOXact_GUC),
 * and every later transaction on the connection asks for the same 32MB, which PostgreSQL
 * accepts: without the library, 201, on a fresh connection and on a reused one.
 *
 * What happens: at the nested COMMIT the library puts the setting back with
 * `set_config('temp_buffers', '8MB', true)` after the RELEASE, which PostgreSQL checks:
 * 22023 "invalid value for parameter "temp_buffers": 1024 … cannot be changed after any
 * temporary tables have been accessed in the session". The nested COMMIT fails (Drizzle's
 * ROLLBACK then meets a savepoint already released): 500, stored and replayed, the import never
 * done, on every connection.
 *
 * What should happen: as PostgreSQL's COMMIT: the setting ends with the nested transaction
 * (or, where PostgreSQL refuses to put it back, is left as it is to the request's COMMIT);
 * 201 once, the rows imported once.
 *
 * Why it matters: `SET LOCAL` is what the guide tells handlers to use for per-step settings,
 * and this one, set before temporary-table work, makes such a request fail for ever.
 */
let db: NodePgDatabase;
let pool: Pool;

type Import = { batch: string; items: string[] };

async function importItems({ batch, items }: Import) {
  await db
    .transaction(async (tx) => {
      await tx.execute(sql`SET LOCAL temp_buffers = '32MB'`);
      await tx.execute(sql`CREATE TEMP TABLE item_stage (item text NOT NULL) ON COMMIT DROP`);
      for (const item of items) await tx.execute(sql`INSERT INTO item_stage VALUES (${item})`);
      await tx.execute(sql`INSERT INTO items (batch, item) SELECT ${batch}, item FROM item_stage`);
    })
    .catch((error: unknown) => {
      if (process.env.ADV_DEBUG) console.log((error as { cause?: unknown }).cause ?? error);
      throw error;
    });
  return { batch, imported: items.length };
}

@Controller()
class ImportController {
  @Post('plain')
  plain(@Body() body: Import) {
    return importItems(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: Import) {
    return importItems(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ImportController],
})
class ImportModule {}

describe('adversary 12: SET LOCAL temp_buffers before temp-table work fails the nested COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv12_temp_buffers', {
      module: ImportModule,
      max: 1,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE items (batch text NOT NULL, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, body: Import, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send(body);
  };

  const itemsOf = async (batch: string) => {
    const { rows } = await fixture.admin.query<{ item: string }>(
      'SELECT item FROM items WHERE batch = $1 ORDER BY item',
      [batch],
    );
    return rows.map((row) => row.item);
  };

  it('without the library (no @Idempotent): 201 twice on one connection (control)', async () => {
    expect((await post('/plain', { batch: 'plain-1', items: ['a'] })).status).toBe(201);
    expect((await post('/plain', { batch: 'plain-2', items: ['b'] })).status).toBe(201);
    expect([...(await itemsOf('plain-1')), ...(await itemsOf('plain-2'))]).toEqual(['a', 'b']);
  }, 20_000);

  it('under @Idempotent(): 201 once, the rows imported once', async () => {
    const body: Import = { batch: 'batch-1', items: ['a', 'b'] };
    const answers: { status: number; body: unknown }[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = await post('/idempotent', body, 'key-1');
      answers.push({ status: answer.status, body: answer.body });
      if (answer.status < 500) break;
    }
    expect({ answers, items: await itemsOf('batch-1') }).toEqual({
      answers: [{ status: 201, body: { batch: 'batch-1', imported: 2 } }],
      items: ['a', 'b'],
    });
  }, 20_000);
});
