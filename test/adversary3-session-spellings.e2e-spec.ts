import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createTestPool, endTestPool } from './support/test-pool.js';

/**
 * adversary3 (issue 27): sessionSettingOf reads a set_config's is_local only as one token
 * (`false`, `'off'`), and a string's value only as a plain '…' string (an E'…' string's
 * backslash escapes, a U&'…' string's Unicode escapes are not decoded). PostgreSQL reads each of
 * these as the session-level default_transaction_read_only, which stays on the pooled connection
 * after the request: the next keyed request there is read only (the library's UPDATE fails).
 */
const LEASE_MS = 600;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let pool: Pool;
/** The refusals the handler met, as their messages. */
const refusals: string[] = [];

@Controller()
class SessionController {
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

  /** A plain handler held past a few heartbeats of its lease: its transaction's level back. */
  @Post('slow')
  @Idempotent({ leaseMs: LEASE_MS })
  async slow(@Body() body: { slot: string }) {
    await pool.query(`INSERT INTO slots (slot) VALUES ($1)`, [body.slot]);
    await sleep(LEASE_MS * 2);
    const { rows } = await pool.query<{ level: string }>(
      `SELECT current_setting('transaction_isolation') AS level`,
    );
    return { slot: body.slot, level: rows[0].level };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [SessionController],
})
class SessionModule {}

describe('adversary3: session defaults set in spellings the lexer does not read', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv3_spellings');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
    // One connection: every request meets the connection the one before gave back.
    pool = createTestPool({ connectionString: database.url, max: 1 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(SessionModule, 'express');
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
    [
      "SELECT set_config('default_transaction_read_only', 'on', false::boolean)",
      "set_config('default_transaction_read_only', …, false)",
    ],
    [
      "SELECT set_config('default_transaction_read_only', 'on', (false))",
      "set_config('default_transaction_read_only', …, false)",
    ],
    [
      "SELECT set_config(E'default_transaction_read_\\x6fnly', 'on', false)",
      "set_config('default_transaction_read_only', …, false)",
    ],
    [
      "SELECT set_config(U&'default_transaction_read_\\006Fnly', 'on', false)",
      "set_config('default_transaction_read_only', …, false)",
    ],
    [
      "UPDATE pg_settings SET setting = 'on' WHERE name = E'default_transaction_read_\\x6fnly'",
      'UPDATE pg_settings (default_transaction_read_only)',
    ],
  ])(
    'refuses %s before it is sent: a final 500, nothing written; the connection serves the next requests as before',
    async (statement, refused) => {
      refusals.length = 0;
      // Each case on a fresh connection: what one case left there must not judge the next.
      await admin.query(
        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
        [database.name],
      );
      await sleep(300);
      const slot = `change-${statement.replace(/\W+/g, '_')}`;
      const first = await post('/change', slot, { slot, statement });
      // The next request on the one connection: its own level, the library's statements there.
      const after = await post('/slow', `${slot}-after`, { slot: `${slot}-after` });
      expect({
        first: first.status,
        refusals: refusals.map((message) => message.split(' refused: ')[0]),
        written: await rows(slot),
        after: { status: after.status, body: after.body as unknown },
      }).toEqual({
        first: 500,
        refusals: [refused],
        written: 0,
        after: { status: 201, body: { slot: `${slot}-after`, level: 'read committed' } },
      });
    },
    30_000,
  );
});
