import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../lib/index.js';
import { type PoolApp, startPoolApp } from '../support/pool-app.js';
import { type TestDatabase } from '../support/database.js';

/**
 * What a handler may change of its pooled connection beyond its request, and the library
 * relies on (found by an adversarial review, issue 27):
 *
 * - the session's defaults for a transaction (`SET default_transaction_isolation`, `SET
 *   SESSION CHARACTERISTICS`): committed with the request, they stayed on the connection, and
 *   a later request on it began SERIALIZABLE while the library planned READ COMMITTED (its
 *   renewals committed apart): held past a heartbeat, 503 on every try;
 * - the library's named statements (`DEALLOCATE ALL`), which node-postgres still believed
 *   prepared: 500 store_misconfigured ("retrying will not help") on every try.
 *
 * Both are refused now, before they are sent, in the library's words, as a session-level SET
 * ROLE is. And the database's default changed while the app runs (ALTER DATABASE): requests
 * keep the level read at start-up, named in their BEGIN, until the app restarts.
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

describe('session state a handler may not change, and a default changed under the app', () => {
  let fixture: PoolApp;
  let admin: Client;
  let app: INestApplication;
  let database: TestDatabase;

  beforeAll(async () => {
    fixture = await startPoolApp('session_defaults', {
      module: SessionModule,
      // One connection: every request meets the connection the one before gave back.
      max: 1,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
      },
    });
    ({ admin, app, database } = fixture);
  });

  afterAll(() => fixture?.close());

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const rows = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  it.each([
    [
      "SET default_transaction_isolation = 'serializable'",
      'SET default_transaction_isolation',
      'isolationLevel',
    ],
    [
      'SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE',
      'SET SESSION CHARACTERISTICS',
      'isolationLevel',
    ],
    [
      "SELECT set_config('default_transaction_read_only', 'on', false)",
      "set_config('default_transaction_read_only', …, false)",
      'SET LOCAL',
    ],
    ['DEALLOCATE ALL', 'DEALLOCATE ALL', 'by their names'],
    // Other spellings PostgreSQL reads as the same setting (adversary rounds 2 and 3).
    [
      "UPDATE pg_settings SET setting = 'on' WHERE name = 'default_transaction_read_only'",
      'UPDATE pg_settings (default_transaction_read_only)',
      'SET LOCAL',
    ],
    [
      'SET U&"default_transaction_read_only" = on',
      'SET default_transaction_read_only',
      'SET LOCAL',
    ],
    [
      "SELECT set_config('default_transaction_read_only', 'on', false::boolean)",
      "set_config('default_transaction_read_only', …, false)",
      'SET LOCAL',
    ],
    [
      "SELECT set_config('default_transaction_read_only', 'on', (false))",
      "set_config('default_transaction_read_only', …, false)",
      'SET LOCAL',
    ],
    [
      "SELECT set_config(E'default_transaction_read_\\x6fnly', 'on', false)",
      "set_config('default_transaction_read_only', …, false)",
      'SET LOCAL',
    ],
    [
      "SELECT set_config(U&'default_transaction_read_\\006Fnly', 'on', false)",
      "set_config('default_transaction_read_only', …, false)",
      'SET LOCAL',
    ],
    [
      "UPDATE pg_settings SET setting = 'on' WHERE name = E'default_transaction_read_\\x6fnly'",
      'UPDATE pg_settings (default_transaction_read_only)',
      'SET LOCAL',
    ],
  ])(
    'refuses %s before it is sent: a final 500, nothing written; the connection serves the next requests as before',
    async (statement, refused, remedy) => {
      refusals.length = 0;
      // Each case on a fresh connection: what one case left there must not judge the next.
      await admin.query(
        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
        [database.name],
      );
      await sleep(300);
      // Two statements that differ only in punctuation must not share a key.
      const slot = `change-${Buffer.from(statement).toString('base64url')}`;
      const first = await post('/change', slot, { slot, statement });
      expect(first.status).toBe(500);
      expect(refusals).toHaveLength(1);
      expect(refusals[0]).toMatch(new RegExp(`^${refused.replace(/[()…]/g, '.')} refused: `));
      expect(refusals[0]).toContain(remedy);
      expect(await rows(slot)).toBe(0);
      // Final: the retry replays it without running the handler.
      const retry = await post('/change', slot, { slot, statement });
      expect({ status: retry.status, text: retry.text }).toEqual({ status: 500, text: first.text });
      expect(refusals).toHaveLength(1);
      // The next request on the one connection: its own level, the library's statements there.
      const after = await post('/slow', `${slot}-after`, { slot: `${slot}-after` });
      expect({ status: after.status, body: after.body as unknown }).toEqual({
        status: 201,
        body: { slot: `${slot}-after`, level: 'read committed' },
      });
    },
    30_000,
  );

  it('keeps the level read at start-up after ALTER DATABASE … SET default_transaction_isolation: a request held past its heartbeats commits on its first try', async () => {
    const warm = await post('/slow', 'warm', { slot: 'warm' });
    expect(warm.status).toBe(201);
    await admin.query(
      `ALTER DATABASE ${database.name} SET default_transaction_isolation = 'serializable'`,
    );
    try {
      // The pool's connection goes (a failover, a pooler's recycling): the next one opened
      // begins SERIALIZABLE unless told otherwise.
      await admin.query(
        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
        [database.name],
      );
      await sleep(300);
      const answers: { status: number; body: unknown }[] = [];
      for (let attempt = 0; attempt < 3; attempt++) {
        const answer = await post('/slow', 'after-alter', { slot: 'after-alter' });
        answers.push({ status: answer.status, body: answer.body as unknown });
        if (answer.status < 500) break;
      }
      expect(answers).toEqual([
        { status: 201, body: { slot: 'after-alter', level: 'read committed' } },
      ]);
      expect(await rows('after-alter')).toBe(1);
    } finally {
      await admin.query(`ALTER DATABASE ${database.name} RESET default_transaction_isolation`);
    }
  }, 30_000);
});
