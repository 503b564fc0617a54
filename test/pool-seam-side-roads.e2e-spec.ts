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
 * The node-postgres pool seam's side roads (found by an adversarial review):
 *
 * - A session-level role, session authorization or search path (SET ROLE, not LOCAL;
 *   set_config(…, false); SET search_path) would outlive the request on its pooled connection
 *   and become "the role the transaction began with" of every later request there (500
 *   database_permanent blaming the grants): refused before it is sent, as session-level
 *   advisory locks are, naming SET LOCAL.
 * - A pg-cursor closed before its first read: submitted only once the BEGIN succeeded, its
 *   close() found no connection, so it stayed counted open (cursor_open, the ROLLBACK waiting
 *   behind it): now withdrawn, never submitted.
 * - SET TRANSACTION ISOLATION LEVEL through pool.query as the first statement (Drizzle's
 *   db.execute, pg, Prisma's $executeRaw) met the session-state capture sent with the BEGIN
 *   (25001): now the level the request's transaction begins at, as on a pool.connect() view,
 *   so that its lease renewals run inside it.
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let pool: Pool;
let drizzleDb: NodePgDatabase;
let kyselyDb: Kysely<unknown>;
let appRole: string;
let prisma: PrismaClient | undefined;
let lastError: Error | undefined;
/** What the late SET TRANSACTION met (see `lateIsolation`). */
let lateMet: string | undefined;
let widePool: Pool | undefined;
let narrowPool: Pool | undefined;

@Controller()
class SideRoadsController {
  /** A handler that narrows its role for its own work, but with SET ROLE (session-level). */
  @Post('leak')
  @Idempotent()
  async leak(@Body() body: { slot: string; how: string }) {
    const set = {
      'set-role': drizzleSql.raw(`set role ${appRole}`),
      'set-config-role': drizzleSql`select set_config('role', ${appRole}, false)`,
      'set-search-path': drizzleSql.raw('set search_path to app_schema'),
    }[body.how]!;
    await drizzleDb.execute(set).catch((error: { cause?: Error }) => {
      lastError = error.cause ?? (error as Error);
      throw error;
    });
    await drizzleDb.execute(
      drizzleSql`INSERT INTO public.slots (slot, who) VALUES (${body.slot}, 'leak')`,
    );
    return { slot: body.slot };
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

  /**
   * The same statement after a write: the transaction has begun, so it goes to PostgreSQL as
   * it is, which refuses it (the library does not pretend to raise the level).
   */
  @Post('late-isolation')
  @Idempotent()
  async lateIsolation(@Body() body: { slot: string }) {
    await pool.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'late']);
    lateMet = await pool.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE').then(
      () => 'sent',
      (error: { code?: string }) => error.code,
    );
    return { met: lateMet };
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
    controllers: [SideRoadsController],
  })
  class AdvModule {}
  return AdvModule;
}

describe('the pool seam keeps its promises on the side roads', () => {
  let database: TestDatabase;
  let db: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('side_roads');
    appRole = `side_app_${database.name.slice(-8)}`;
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

  describe('a session-level role or search path is refused, so the pooled connection stays clean', () => {
    it.each([
      ['set-role', 'SET ROLE'],
      ['set-config-role', "set_config('role', …, false)"],
      ['set-search-path', 'SET search_path'],
    ])(
      'refuses %s (not LOCAL) before it is sent, naming SET LOCAL: 500, nothing written, and later requests of other keys on that connection commit',
      async (how, named) => {
        const slot = `leak-${how}`;
        const first = await post('/leak', slot, { slot, how });
        const met = lastError;
        lastError = undefined;
        // Refused up front, as session-level advisory locks are: the request rolls back.
        expect(first.status).toBe(500);
        expect(met?.name).toBe('SessionSettingRefusedError');
        expect(met?.message).toContain(`${named} refused`);
        expect(met?.message).toContain('SET LOCAL');
        expect(met?.message).toContain('set_config(');
        expect(await rows(slot)).toEqual([]);
        const again = await post('/leak', slot, { slot, how });
        expect(again.status).toBe(500);
        lastError = undefined;
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

  describe('SET TRANSACTION ISOLATION LEVEL through pool.query sets the level the request begins at', () => {
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
    it('after a write, sends it as it is: PostgreSQL refuses it (25001), the request rolls back (500 transaction_aborted), nothing written', async () => {
      const slot = 'late-isolation';
      const answer = await post('/late-isolation', slot, { slot });
      expect(lateMet).toBe('25001');
      expect(answer.status).toBe(500);
      expect((answer.body as { code?: string }).code).toBe('transaction_aborted');
      expect(await rows(slot)).toEqual([]);
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
