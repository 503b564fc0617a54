import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createTestPool, endTestPool } from './support/test-pool.js';

/**
 * Adversary, round 2 (issue 27): other spellings of the session-level settings that
 * `sessionSettingOf` refuses (lib/transaction/sql-text.ts). PostgreSQL documents
 * `UPDATE pg_settings SET setting = … WHERE name = …` as equivalent to `SET` (session-level,
 * committed with the transaction), and reads a Unicode-escaped quoted name (`U&"role"`) as the
 * setting it spells. Neither is refused: committed with the request, the setting stays with
 * the pooled connection, and the next keyed request on that connection fails (here
 * `default_transaction_read_only`: the library's own claim and the handler's writes meet
 * 25006 "cannot execute … in a read-only transaction").
 *
 * Expected (as for `SET default_transaction_read_only`, test/session-defaults-refused):
 * refused before it is sent, a final 500, nothing written, and the next request on the one
 * connection answers 201.
 */
let pool: Pool;
const refusals: string[] = [];

@Controller()
class SpellingController {
  @Post('change')
  @Idempotent()
  async change(@Body() body: { slot: string; statement: string }) {
    await pool.query(`INSERT INTO slots (slot) VALUES ($1)`, [body.slot]);
    try {
      await pool.query(body.statement);
    } catch (error) {
      refusals.push((error as Error).message);
      throw error;
    }
    return { slot: body.slot };
  }

  @Post('next')
  @Idempotent()
  async next(@Body() body: { slot: string }) {
    await pool.query(`INSERT INTO slots (slot) VALUES ($1)`, [body.slot]);
    return { slot: body.slot };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [SpellingController],
})
class SpellingModule {}

describe('adversary 2: session-level settings spelled another way', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv2_spellings');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
    // One connection: every request meets the connection the one before gave back.
    pool = createTestPool({ connectionString: database.url, max: 1 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(SpellingModule, 'express');
  });

  afterEach(async () => {
    // Whatever a case left on the pool's one connection goes with it.
    await admin.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
      [database.name],
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
  });

  afterAll(async () => {
    await app?.close();
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
  });

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const rows = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  it.each([
    ["UPDATE pg_settings SET setting = 'on' WHERE name = 'default_transaction_read_only'"],
    ['SET U&"default_transaction_read_only" = on'],
  ])(
    'refuses %s as it refuses SET default_transaction_read_only: a final 500, nothing written; the next request on the connection 201',
    async (statement) => {
      refusals.length = 0;
      const slot = `change-${statement.replace(/\W+/g, '_')}`;
      const first = await post('/change', slot, { slot, statement });
      const next = await post('/next', `${slot}-next`, { slot: `${slot}-next` });
      expect({
        status: first.status,
        refused: refusals.length,
        written: await rows(slot),
        next: next.status,
        nextWritten: await rows(`${slot}-next`),
      }).toEqual({ status: 500, refused: 1, written: 0, next: 201, nextWritten: 1 });
    },
    30_000,
  );
});
