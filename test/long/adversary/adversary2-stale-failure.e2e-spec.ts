import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Pool } from 'pg';
import Cursor from 'pg-cursor';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 2 (issue 27), on fix 5 (a 25P02 is classified by the failure before it:
 * RequestTransaction.noteFailure / failureOf, lib/transaction/failure.ts). `lastError` keeps the last
 * failure that was noted, even one that a nested transaction's rollback already recovered
 * from, and a cursor's failure (PoolTransaction.submit, Kysely's `stream()`) is never noted.
 * So: a nested transaction whose statement timed out (57014, caught, its savepoint rolled
 * back: the request's transaction is fine), then a stream whose query fails for good (22012,
 * caught: now the transaction is aborted), then a write: 25P02. It is judged by the stale
 * 57014: 503 database_transient with Retry-After, nothing stored, and every retry the same
 * 503 (the handler's failure is deterministic). Expected: the failure that aborted the
 * transaction decides: the answer the same handler gets without the recovered step (its 500,
 * as the control shows), not a transient 503 that every retry meets again.
 */
interface Items {
  items: { n: number };
  copies: { n: number; tag: string };
}
let pool: Pool;
let db: Kysely<Items>;

@Controller()
class StaleController {
  @Post('stale')
  @Idempotent()
  async stale(@Body() body: { tag: string; recovered?: boolean }) {
    await db.insertInto('copies').values({ n: 0, tag: body.tag }).execute();
    if (body.recovered) {
      try {
        // Optional work, given up when the database is slow: its savepoint rolls back alone.
        await db.transaction().execute(async (trx) => {
          await sql`SET LOCAL statement_timeout = 50`.execute(trx);
          await sql`SELECT pg_sleep(1)`.execute(trx);
        });
      } catch {
        // skipped
      }
    }
    try {
      for await (const row of db
        .selectFrom('items')
        .select(sql<number>`10 / (n - 3)`.as('q'))
        .orderBy('n')
        .stream(1)) {
        void row;
      }
    } catch {
      // a bad row: the handler goes on (its mistake: no savepoint)
    }
    await db.insertInto('copies').values({ n: 1, tag: body.tag }).execute();
    return { tag: body.tag };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [StaleController],
})
class StaleModule {}

describe('adversary 2: a 25P02 judged by a failure already recovered from', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv2_stale_failure');
    pool = createTestPool({ connectionString: database.url, max: 4 });
    await pool.query(readFileSync('migrations/schema.sql', 'utf8'));
    await pool.query(
      'CREATE TABLE items (n int PRIMARY KEY); INSERT INTO items SELECT generate_series(1, 5);' +
        'CREATE TABLE copies (id serial PRIMARY KEY, n int NOT NULL, tag text NOT NULL)',
    );
    db = new Kysely<Items>({ dialect: new PostgresDialect({ pool, cursor: Cursor }) });
    app = await bootstrapTestApp(StaleModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await endTestPool(pool);
    await database?.drop();
  });

  it('answers as it does without the recovered failure (a 500), not 503 database_transient on every try', async () => {
    const send = (key: string, recovered: boolean) =>
      request(app.getHttpServer())
        .post('/stale')
        .set('Idempotency-Key', key)
        .send({ tag: key, recovered });
    const seen = (answer: { status: number; body: unknown }) => ({
      status: answer.status,
      body: answer.body,
    });
    // The control: the same handler without the nested transaction that timed out.
    const control = seen(await send('control', false));
    expect(control.status).toBe(500);
    const answers = [seen(await send('stale-1', true)), seen(await send('stale-1', true))];
    const copies = await pool.query('SELECT 1 FROM copies WHERE tag = $1', ['stale-1']);
    expect({ answers, copies: copies.rowCount }).toEqual({
      answers: [control, control],
      copies: 0,
    });
  });
});
