import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): the
 * documented way to tune an extension's setting for one query, inside a transaction: pg_trgm's
 * `SET LOCAL pg_trgm.similarity_threshold = 0.6`, then a `%` search, and a write when nothing
 * similar is there (find-or-create a customer by a fuzzy name).
 *
 * What happens: the library reads the setting's value just before the `SET LOCAL`, to put it
 * back at the nested transaction's COMMIT. On a connection that has not used pg_trgm yet, the
 * setting is not defined (read as null); the `%` search then loads pg_trgm, which defines it
 * as a real number. At the COMMIT the library puts back '' (`set_config(…, '', true)`), which
 * PostgreSQL refuses: `invalid value for parameter "pg_trgm.similarity_threshold": ""` (in the
 * server's log, on the library's `RELEASE SAVEPOINT …; … SELECT set_config(…, '', true)`). The
 * data layer's COMMIT fails, Drizzle's ROLLBACK then meets `savepoint "idempotency_nested_1"
 * does not exist`, and the request answers 500, where without the library the same code
 * answers 201 (PostgreSQL ends a SET LOCAL at COMMIT, setting nothing). Every connection the
 * pool opens anew fails so its first such request.
 *
 * What should happen: 201 at the first try, once, as without the library.
 */
let db: NodePgDatabase;

async function work(body: { name: string }) {
  return db.transaction(async (tx) => {
    await tx.execute(sql`SET LOCAL pg_trgm.similarity_threshold = 0.6`);
    const similar = await tx.execute<{ id: number }>(
      sql`SELECT id FROM customers WHERE name % ${body.name} LIMIT 1`,
    );
    if (similar.rows.length > 0) return { id: similar.rows[0].id, created: false };
    const created = await tx.execute<{ id: number }>(
      sql`INSERT INTO customers (name) VALUES (${body.name}) RETURNING id`,
    );
    return { id: created.rows[0].id, created: true };
  });
}

@Controller()
class CustomersController {
  @Post('plain')
  plain(@Body() body: { name: string }) {
    return work(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { name: string }) {
    return work(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [CustomersController],
})
class CustomersModule {}

let pool: Pool;
const poolOf = () => pool;

describe('adversary 10: an extension setting set LOCAL in a nested transaction cannot be put back', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv10_extension_setting', {
      module: CustomersModule,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query('CREATE EXTENSION pg_trgm');
        await admin.query('CREATE TABLE customers (id serial PRIMARY KEY, name text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, name: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ name });
  };

  // First: on connections that have not used pg_trgm yet, as after every start and every
  // connection the pool opens anew.
  it('under @Idempotent(): 201 at the first try, the customer written once', async () => {
    const answer = await post('/idempotent', 'Ada Lovelace', 'key-1');
    expect({ status: answer.status, body: answer.body as unknown }).toEqual({
      status: 201,
      body: { id: 1, created: true },
    });
    const { rows } = await fixture.admin.query('SELECT count(*)::int AS n FROM customers');
    expect(rows[0].n).toBe(1);
  }, 30_000);

  it('without the library (no @Idempotent), on a fresh connection: 201 (control)', async () => {
    // A connection of its own that has not used pg_trgm: what the idempotent route met.
    const { createTestPool, endTestPool } = await import('../../support/test-pool.js');
    const fresh = createTestPool({ connectionString: fixture.database.url, max: 1 });
    const previous = db;
    db = drizzle({ client: fresh });
    try {
      const answer = await post('/plain', 'Grace Hopper');
      expect(answer.status).toBe(201);
    } finally {
      db = previous;
      await endTestPool(fresh);
    }
  }, 30_000);
});
