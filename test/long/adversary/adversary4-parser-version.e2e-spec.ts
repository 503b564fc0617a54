import {
  Body,
  ConflictException,
  Controller,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';
import { type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 4: the handler's SQL is read with libpg-query v18 (PostgreSQL 18's grammar),
 * while the server runs PostgreSQL 15. `SYSTEM_USER` became a reserved keyword in PostgreSQL
 * 16; in 15 it is an ordinary name, so a table (or alias, or column) called `system_user` is
 * valid there. The v18 parser refuses every text that names it where only a name may stand
 * (`UPDATE system_user`, a column `system_user.id`; a bare `FROM system_user` it reads as the
 * function), `parsedStatements` answers null, and every check (`transactionControlOf`, `sessionAdvisoryLockOf`, `sessionSettingOf`,
 * `setsReadOnly`) reads "nothing here", while the server runs every statement of the text.
 * "A text the parser refuses is let through: the server refuses it too" (transactions.md) does
 * not hold across versions. The same statement on a table of another name is refused, as the
 * docs promise: that is the control.
 */
let pool: Pool;
/** The messages of what the handler's statements were refused with. */
const refusals: string[] = [];

/**
 * The refusal expected: the reader's own words where it reads the text; where the parser
 * cannot (system_user), the refusal of a text the library cannot read, with the parser's
 * words, since it names a COMMIT, an advisory lock or set_config it cannot place.
 */
const refusalOf = (table: string, named: string) =>
  table === 'system_user'
    ? expect.stringMatching(
        /^A statement the library could not read was refused \(PostgreSQL’s parser: syntax error at or near /,
      )
    : expect.stringContaining(named);

@Controller()
class NamesController {
  /** Writes its slot, sends the statement, then fails: everything must roll back. */
  @Post('then-fail')
  @Idempotent()
  async thenFail(@Body() body: { slot: string; statement: string }) {
    await pool.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
    try {
      await pool.query(body.statement);
    } catch (error) {
      refusals.push((error as Error).message);
      throw error;
    }
    throw new ConflictException('the order was already shipped');
  }

  /** Writes its slot and sends the statement: answers 201. */
  @Post('write')
  @Idempotent()
  async write(@Body() body: { slot: string; statement?: string }) {
    await pool.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
    if (body.statement) {
      try {
        await pool.query(body.statement);
      } catch (error) {
        refusals.push((error as Error).message);
        throw error;
      }
    }
    return { slot: body.slot };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NamesController],
})
class NamesModule {}

describe('adversary 4: a text PostgreSQL 15 runs that the v18 parser refuses (system_user)', () => {
  let fixture: PoolApp;
  let admin: Client;
  let app: INestApplication;
  let database: TestDatabase;

  beforeAll(async () => {
    fixture = await startPoolApp('adv4_parser_version', {
      module: NamesModule,
      // One connection: every request meets the connection the one before gave back.
      max: 1,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
        // Two tables alike but for their names: PostgreSQL 15 takes both.
        for (const table of ['system_user', 'app_user']) {
          await admin.query(`CREATE TABLE ${table} (id int PRIMARY KEY, seen int NOT NULL)`);
          await admin.query(`INSERT INTO ${table} VALUES (1, 0)`);
        }
        await admin.query('CREATE SCHEMA elsewhere');
      },
    });
    ({ admin, app, database } = fixture);
  });

  afterAll(() => fixture?.close());

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const rows = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;
  const freshConnection = async () => {
    await admin.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
      [database.name],
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
  };

  it('the server (PostgreSQL 15) runs the text; the library reads nothing in it', async () => {
    const { rows: found } = await admin.query<{ seen: number }>(
      'SELECT seen FROM system_user WHERE id = 1',
    );
    expect(found).toEqual([{ seen: 0 }]);
  });

  it.each(['app_user', 'system_user'])(
    'a COMMIT after an UPDATE of %s is refused: the handler fails after it, nothing of it is kept',
    async (table) => {
      refusals.length = 0;
      await freshConnection();
      const slot = `commit-${table}`;
      const statement = `UPDATE ${table} SET seen = seen + 1 WHERE id = 1; COMMIT`;
      const first = await post('/then-fail', slot, { slot, statement });
      expect({
        status: first.status,
        refused: [...refusals],
        kept: await rows(slot),
      }).toEqual({
        status: 500,
        refused: [refusalOf(table, 'COMMIT')],
        kept: 0,
      });
      // Before the fix, on system_user: 409 (the handler's own error, "rolled back"), no
      // refusal, and the slot committed mid-handler by the hidden COMMIT: kept 1.
    },
    30_000,
  );

  it.each(['app_user', 'system_user'])(
    'a session-level advisory lock taken in a read of %s is refused: no lock stays on the pooled connection',
    async (table) => {
      refusals.length = 0;
      await freshConnection();
      const slot = `lock-${table}`;
      const statement = `SELECT pg_advisory_lock(4242 + ${table}.id) FROM ${table} WHERE ${table}.id = 1`;
      const first = await post('/write', slot, { slot, statement });
      const { rows: held } = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = 4243 AND granted`,
      );
      expect({
        status: first.status,
        refused: [...refusals],
        held: held[0].n,
      }).toEqual({
        status: 500,
        refused: [refusalOf(table, 'pg_advisory_lock')],
        held: 0,
      });
      // Before the fix, on system_user: 201, no refusal, and the lock held by the idle pooled
      // connection after the request (held: 1), as transactions.md says it must never be.
    },
    30_000,
  );

  it.each(['app_user', 'system_user'])(
    'a session-level search_path set in a read of %s is refused: the next request on the connection is not broken',
    async (table) => {
      refusals.length = 0;
      await freshConnection();
      const slot = `path-${table}`;
      const statement = `SELECT set_config('search_path', 'elsewhere', false) FROM ${table} WHERE ${table}.id = 1`;
      const first = await post('/write', slot, { slot, statement });
      const refused = [...refusals];
      // The next request, of another client, on the one pooled connection.
      const next = await post('/write', `${slot}-next`, { slot: `${slot}-next` });
      expect({
        status: first.status,
        refused,
        next: next.status,
        kept: await rows(`${slot}-next`),
      }).toEqual({
        status: 500,
        refused: [refusalOf(table, 'search_path')],
        next: 201,
        kept: 1,
      });
      // Before the fix, on system_user: the first request 201 (not refused), and every later request
      // on that connection 500 (relation "slots" does not exist: its search path is gone).
    },
    30_000,
  );
});
