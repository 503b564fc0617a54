import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 2 (issue 27), on fix 4 (a data layer's outermost nested transaction puts
 * its role, session authorization and search path back at its COMMIT): each one keeps them in
 * three settings named after its savepoint (`idempotency.idempotency_nested_<n>_role`…,
 * session-state.ts keepNestedState), `n` counting every nested transaction of the request. A
 * custom setting, once set, stays defined in the backend for the life of the connection
 * (PostgreSQL keeps the placeholder; only its value ends with the transaction), so a request
 * that runs N nested transactions one after the other (a row per `db.transaction()`, the
 * docs' recipe for statements expected to fail) leaves 3·N settings on its pooled connection.
 * On PostgreSQL 15 and older each new one re-sorts the whole settings array: measured here
 * with psql on 15.20, 3000 new settings in one session take 3.8 s of server time, the next
 * 3000 6.3 s (the same 3000 again: 11 ms): quadratic, on the request's connection, while it
 * holds its key. Through this app, 1500 nested transactions in one request took 14.4 s on a
 * fresh connection and 1.2 s the second time on the same one. Expected: a bounded number (by nesting depth, not by count); here at most 3
 * after 300 nested transactions. Read on the same connection (a pool of one) by
 * `current_setting(name, true)`, which is NULL only for a setting never defined.
 */
const NESTED = 300;
let pool: Pool;
let db: NodePgDatabase;

@Controller()
class ImportController {
  @Post('import')
  @Idempotent()
  async import(@Body() body: { rows: number }) {
    for (let i = 0; i < body.rows; i++) {
      await db.transaction(async (tx) => {
        await tx.execute(sql`INSERT INTO imported (n) VALUES (${i})`);
      });
    }
    return { imported: body.rows };
  }

  /** Without the library: what the connection keeps defined. */
  @Post('defined')
  async defined() {
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM generate_series(1, $1::int) i
        WHERE current_setting('idempotency.idempotency_nested_' || i || '_role', true) IS NOT NULL`,
      [NESTED * 2],
    );
    return { defined: rows[0].n };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ImportController],
})
class ImportModule {}

describe('adversary 2: settings an outermost nested transaction leaves on the connection', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv2_nested_growth');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE imported (n int NOT NULL)');
    // One connection: the request's, then the probe's.
    pool = createTestPool({ connectionString: database.url, max: 1 });
    db = drizzle({ client: pool });
    app = await bootstrapTestApp(ImportModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
  });

  it(`leaves a bounded number of settings after ${NESTED} nested transactions, not one set per transaction`, async () => {
    const imported = await request(app.getHttpServer())
      .post('/import')
      .set('Idempotency-Key', 'import-1')
      .send({ rows: NESTED });
    expect({ status: imported.status, body: imported.body as unknown }).toEqual({
      status: 201,
      body: { imported: NESTED },
    });
    const probe = await request(app.getHttpServer()).post('/defined').send({});
    expect((probe.body as { defined: number }).defined).toBeLessThanOrEqual(3);
  });
});
