import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect, sql as kyselySql } from 'kysely';
import { Client, type Pool } from 'pg';
import Cursor from 'pg-cursor';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from './examples/support/prisma-on-call/generated/client.js';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createTestPool, endTestPool } from './support/test-pool.js';

/**
 * Adversary (advpool): the node-postgres pool seam's side roads.
 *
 * 1. Session-level role / search_path (SET ROLE, not LOCAL; set_config(..., false); SET
 *    search_path) set by one request's handler outlives its transaction on the pooled
 *    connection, and becomes "the role/search path the transaction began with" for every later
 *    request on that connection: unrelated keys then fail 500 database_permanent, with a
 *    message blaming the grants. (The library refuses session-level advisory locks for exactly
 *    this reason, but not these.)
 * 2. SET TRANSACTION ISOLATION LEVEL sent through pool.query (Drizzle's db.execute, Kysely's
 *    sql.execute(db)) as the handler's first statement makes the request's transaction
 *    SERIALIZABLE without the library knowing (it is seen only on a pool.connect() view): the
 *    lease renewals commit apart, and the fenced update then fails 40001 every time: a 503
 *    database_transient for a permanent condition. Found instead: it fails at once with 25001
 *    ("must be called before any query"): the library's CAPTURE_SESSION_STATE SELECT, sent in
 *    the BEGIN's round trip, is that query. The 500 is stored and replayed (pg, Drizzle, Prisma
 *    $executeRaw; Kysely and a pool.connect() view are seen as nested control and pass).
 * 3. SET LOCAL SESSION AUTHORIZATION in a handler: the library puts back only `role`, so its
 *    fenced update runs as the handler's user (42501, 500 database_permanent, every retry), and
 *    its log says it ran as the role the transaction began with.
 * 4. A pg-cursor closed before its first read: PoolTransaction.submit() submits it later, so
 *    pg-cursor's close() finds no connection and does nothing; the cursor stays counted open
 *    (and then really opens): the next write is refused 500 cursor_open, whose message says to
 *    close it (it was), after the ROLLBACK waited databaseTimeoutMs behind it.
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let pool: Pool;
let drizzleDb: NodePgDatabase;
let kyselyDb: Kysely<unknown>;
let appRole: string;
let prisma: PrismaClient | undefined;
let lastError: Error | undefined;
let widePool: Pool | undefined;
let narrowPool: Pool | undefined;

@Controller()
class AdvController {
  /** A handler that narrows its role for its own work, but with SET ROLE (session-level). */
  @Post('leak')
  @Idempotent()
  async leak(@Body() body: { slot: string; how: string }) {
    const set = {
      'set-role': drizzleSql.raw(`set role ${appRole}`),
      'set-config-role': drizzleSql`select set_config('role', ${appRole}, false)`,
      'set-search-path': drizzleSql.raw('set search_path to app_schema'),
    }[body.how]!;
    await drizzleDb.execute(set);
    await drizzleDb.execute(
      drizzleSql`INSERT INTO public.slots (slot, who) VALUES (${body.slot}, 'leak')`,
    );
    return { slot: body.slot };
  }

  /**
   * The handler narrows its own statements with SET LOCAL SESSION AUTHORIZATION (a pool that
   * logs in as the database owner): LOCAL, so nothing outlives the transaction.
   */
  @Post('local-authorization')
  @Idempotent()
  async localAuthorization(@Body() body: { slot: string }) {
    await drizzleDb.execute(drizzleSql.raw(`set local session authorization ${appRole}`));
    await drizzleDb.execute(
      drizzleSql`INSERT INTO slots (slot, who) VALUES (${body.slot}, 'auth')`,
    );
    const { rows } = await drizzleDb.execute<{ who: string }>(
      drizzleSql`SELECT current_user AS who`,
    );
    return { who: rows[0].who };
  }

  /**
   * pg-cursor on a connection of the pool, closed before any read (the rows turned out not to
   * be needed), then a write: with node-postgres alone the cursor is submitted at once and its
   * close() ends it.
   */
  @Post('cursor-closed')
  @Idempotent()
  async cursorClosed(@Body() body: { slot: string; first: boolean }) {
    if (body.first) {
      await pool.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'before']);
    }
    const client = await pool.connect();
    try {
      const cursor = client.query(new Cursor('SELECT slot FROM slots'));
      await cursor.close();
      await client.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'after']);
    } finally {
      client.release();
    }
    return { slot: body.slot };
  }

  /** A plain handler: nothing of its own touches the session. */
  @Post('plain')
  @Idempotent()
  async plain(@Body() body: { slot: string }) {
    await drizzleDb.execute(drizzleSql`INSERT INTO slots (slot, who) VALUES (${body.slot}, 'p')`);
    return { slot: body.slot };
  }

  /** The request's transaction made SERIALIZABLE by its first statement, held past heartbeats. */
  @Post('serializable')
  @Idempotent({ leaseMs: 600 })
  async serializable(@Body() body: { slot: string; via: string }) {
    if (body.via === 'drizzle') {
      await drizzleDb
        .execute(drizzleSql`set transaction isolation level serializable`)
        .catch((error: { cause?: Error }) => {
          lastError = error.cause ?? (error as Error);
          throw error;
        });
    } else if (body.via === 'prisma') {
      await prisma!
        .$executeRawUnsafe('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE')
        .catch((error: Error) => {
          lastError = error;
          throw error;
        });
    } else if (body.via === 'pg') {
      await pool.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE').catch((error) => {
        lastError = error as Error;
        throw error;
      });
    } else if (body.via === 'kysely') {
      await kyselySql`set transaction isolation level serializable`.execute(kyselyDb);
    } else {
      // The control: the same statement on a connection of the pool (a view), which is seen.
      const client = await pool.connect();
      try {
        await client.query('set transaction isolation level serializable');
      } finally {
        client.release();
      }
    }
    await pool.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, body.via]);
    await sleep(1000);
    const { rows } = await pool.query<{ level: string }>(
      "SELECT current_setting('transaction_isolation') AS level",
    );
    return { level: rows[0].level };
  }
}

function appModule(of: () => Pool) {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: of() }) }),
    ],
    controllers: [AdvController],
  })
  class AdvModule {}
  return AdvModule;
}

describe('adversary advpool: the pool seam', () => {
  let database: TestDatabase;
  let db: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv_pool');
    appRole = `adv_app_${database.name.slice(-8)}`;
    db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(readFileSync('migrations/schema.sql', 'utf8'));
    await db.query(`
      CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL, who text NOT NULL);
      CREATE SCHEMA app_schema;
      CREATE ROLE ${appRole} NOLOGIN;
      GRANT SELECT, INSERT ON slots TO ${appRole};
      GRANT USAGE ON SEQUENCE slots_id_seq TO ${appRole};
      GRANT USAGE ON SCHEMA app_schema TO ${appRole};`);
    // One connection: the next request meets the connection the last one gave back.
    pool = narrowPool = createTestPool({ connectionString: database.url, max: 1 });
    drizzleDb = drizzle({ client: pool });
    kyselyDb = new Kysely({ dialect: new PostgresDialect({ pool }) });
    app = await bootstrapTestApp(
      appModule(() => pool),
      'express',
    );
  });
  afterAll(async () => {
    await app?.close();
    await prisma?.$disconnect();
    await endTestPool(narrowPool);
    await endTestPool(widePool);
    await db?.end();
    await database?.drop();
    const admin = new Client({ connectionString: process.env.TEST_DATABASE_URL });
    await admin.connect();
    await admin.query(`DROP ROLE IF EXISTS ${appRole}`).catch(() => undefined);
    await admin.end();
  });

  const rows = async (slot: string) =>
    (await db.query<{ who: string }>('SELECT who FROM slots WHERE slot = $1', [slot])).rows;
  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);

  describe('session-level state a handler leaves on the pooled connection', () => {
    it.each([['set-role'], ['set-config-role'], ['set-search-path']])(
      'a handler that runs %s (not LOCAL) leaves later requests of other keys able to commit',
      async (how) => {
        const slot = `leak-${how}`;
        const first = await post('/leak', slot, { slot, how });
        // Either refused up front (as session-level advisory locks are), or it commits.
        if (first.status === 201) {
          expect(await rows(slot)).toEqual([{ who: 'leak' }]);
        }
        // An unrelated request, a fresh key, a handler that sets nothing.
        for (let i = 0; i < 3; i++) {
          const other = `after-${how}-${i}`;
          const answer = await post('/plain', other, { slot: other });
          expect({ status: answer.status, body: answer.body as unknown }).toEqual({
            status: 201,
            body: { slot: other },
          });
          expect(await rows(other)).toEqual([{ who: 'p' }]);
        }
        // Clean the connection for the next case.
        await pool.query('RESET ROLE; RESET search_path');
      },
    );
  });

  it('stores the answer after SET LOCAL SESSION AUTHORIZATION in the handler (the library runs as the transaction began): 201, one row, replayed', async () => {
    const slot = 'local-authorization';
    const answers = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const answer = await post('/local-authorization', slot, { slot });
      answers.push({ status: answer.status, body: answer.body as unknown });
    }
    expect(answers).toEqual([
      { status: 201, body: { who: appRole } },
      { status: 201, body: { who: appRole } },
    ]);
    expect(await rows(slot)).toEqual([{ who: 'auth' }]);
  });

  it.each([[true], [false]])(
    'writes after a pg-cursor closed before its first read (a write before it: %s): 201, replayed, the rows once',
    async (first) => {
      const slot = `cursor-closed-${first}`;
      const answer = await post('/cursor-closed', slot, { slot, first });
      expect({ status: answer.status, body: answer.body as unknown }).toEqual({
        status: 201,
        body: { slot },
      });
      const again = await post('/cursor-closed', slot, { slot, first });
      expect(again.text).toBe(answer.text);
      expect((await rows(slot)).map((row) => row.who)).toEqual(
        first ? ['before', 'after'] : ['after'],
      );
    },
    30_000,
  );

  describe('SET TRANSACTION ISOLATION LEVEL through pool.query', () => {
    beforeAll(async () => {
      // Room for the lease renewals beside the request's connection.
      await app.close();
      widePool = createTestPool({ connectionString: database.url, max: 4 });
      pool = widePool;
      drizzleDb = drizzle({ client: pool });
      kyselyDb = new Kysely({ dialect: new PostgresDialect({ pool }) });
      prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
      app = await bootstrapTestApp(
        appModule(() => pool),
        'express',
      );
    });
    it.each([['view'], ['kysely'], ['drizzle'], ['pg'], ['prisma']])(
      'a handler held past its heartbeats after making its transaction SERIALIZABLE (%s) commits once: 201, one row',
      async (via) => {
        const slot = `ser-${via}`;
        const answers = [];
        for (let attempt = 0; attempt < 2; attempt++) {
          const answer = await post('/serializable', slot, { slot, via });
          answers.push({ status: answer.status, body: answer.body as unknown });
          if (answer.status === 201) break;
        }
        // What the handler met, if it failed (the first statement it sent was this one): 25001
        // "SET TRANSACTION ISOLATION LEVEL must be called before any query".
        const met = lastError?.message;
        lastError = undefined;
        expect(met).toBeUndefined();
        expect(answers[0]).toEqual({ status: 201, body: { level: 'serializable' } });
        expect(await rows(slot)).toEqual([{ who: via }]);
      },
    );
  });
});
