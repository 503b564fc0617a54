import { readFileSync } from 'node:fs';
import {
  type ArgumentsHost,
  Body,
  Catch,
  ConflictException,
  Controller,
  HttpException,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { APP_FILTER, BaseExceptionFilter, HttpAdapterHost } from '@nestjs/core';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect, sql as kyselySql } from 'kysely';
import { Client, Pool } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../lib/index.js';
import { RESTORE_SESSION_STATE, runSurrounded } from '../../lib/connection/session-state.js';
import { bootstrapTestApp } from '../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { createTestPool, endTestPool } from '../support/test-pool.js';

/**
 * Session state a handler sets on the request's connection that outlives what the handler
 * thinks it scoped (issue 27, items 4 and 6): a session-level advisory lock, whose unlock runs
 * before the request's COMMIT; and `SET LOCAL ROLE` / `search_path`, which PostgreSQL keeps
 * across `RELEASE SAVEPOINT`, so that the library's own statements would run under them. On a
 * node-postgres pool (pg, Drizzle, Kysely) and on TypeORM, with real concurrent requests.
 */
const PROBLEM = /^application\/problem\+json/;
/** The slot-booking recipes' answer when the slot is taken: final, stored. */
const TAKEN = 'slot taken';

interface Booking {
  slot: string;
  /** The advisory function to try (the refusal cells). */
  fn?: string;
  /** Milliseconds between the check and the insert: the race's window. */
  holdMs?: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const lockKey = (slot: string) =>
  [...slot].reduce((hash, c) => (hash * 31 + c.charCodeAt(0)) | 0, 7);

/** Names the refusal that a handler did not catch, so the test reads what the developer reads. */
@Catch()
class RefusalFilter extends BaseExceptionFilter {
  constructor(private readonly host: HttpAdapterHost) {
    super();
  }

  override catch(error: unknown, host: ArgumentsHost): void {
    // A refusal met by a statement reaches the handler wrapped: TypeORM's QueryFailedError
    // keeps it as driverError, Drizzle's DrizzleQueryError as cause.
    const wrapped = error as { driverError?: unknown; cause?: unknown } | undefined;
    const refusal = (wrapped?.driverError ?? wrapped?.cause ?? error) as Error | undefined;
    const name = refusal?.name ?? '';
    if (error instanceof HttpException || !name.endsWith('RefusedError')) {
      return super.catch(error, host);
    }
    const response = host.switchToHttp().getResponse<object>();
    this.host.httpAdapter.reply(response, { error: name, message: refusal!.message }, 500);
  }
}

let pool: Pool;
let drizzleDb: NodePgDatabase;
let kyselyDb: Kysely<unknown>;
/** The restricted role the RLS recipes switch to (cluster-wide: named per run). */
let appRole: string;

@Controller()
class PoolController {
  /** The mutex recipe on a connection of the pool (pg): lock, check, insert, unlock. */
  @Post('pg/session-lock')
  @Idempotent()
  async pgSessionLock(@Body() body: Booking) {
    const client = await pool.connect();
    try {
      await client.query('SELECT pg_advisory_lock($1)', [lockKey(body.slot)]);
      try {
        const { rows } = await client.query('SELECT 1 FROM slots WHERE slot = $1', [body.slot]);
        if (rows.length > 0) throw new ConflictException(TAKEN);
        await sleep(body.holdMs ?? 0);
        await client.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'pg']);
      } finally {
        await client.query('SELECT pg_advisory_unlock($1)', [lockKey(body.slot)]);
      }
      return { booked: body.slot };
    } finally {
      client.release();
    }
  }

  /** The same with a transaction-level lock: released by the request's own COMMIT. */
  @Post('pg/xact-lock')
  @Idempotent()
  async pgXactLock(@Body() body: Booking) {
    await pool.query('SELECT pg_advisory_xact_lock($1)', [lockKey(body.slot)]);
    const { rows } = await pool.query('SELECT 1 FROM slots WHERE slot = $1', [body.slot]);
    if (rows.length > 0) throw new ConflictException(TAKEN);
    await sleep(body.holdMs ?? 0);
    await pool.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'xact']);
    return { booked: body.slot };
  }

  /** One advisory function, through each way a data layer on the pool sends SQL. */
  @Post('pg/advisory')
  @Idempotent()
  async pgAdvisory(@Body() body: Booking) {
    await pool.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'pg']);
    await pool.query(`SELECT ${body.fn}`);
    return { ran: body.fn };
  }

  /** A handler that catches the refusal and answers anyway. */
  @Post('pg/advisory-caught')
  @Idempotent()
  async pgAdvisoryCaught(@Body() body: Booking) {
    await pool.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'caught']);
    const locked = await pool
      .query('SELECT pg_try_advisory_lock($1)', [lockKey(body.slot)])
      .catch(() => undefined);
    return { locked: locked !== undefined };
  }

  @Post('drizzle/advisory')
  @Idempotent()
  async drizzleAdvisory(@Body() body: Booking) {
    await drizzleDb.execute(drizzleSql`INSERT INTO slots (slot, who) VALUES (${body.slot}, 'd')`);
    await drizzleDb.execute(drizzleSql`select pg_advisory_lock(${lockKey(body.slot)})`);
    return { ran: 'drizzle' };
  }

  @Post('kysely/advisory')
  @Idempotent()
  async kyselyAdvisory(@Body() body: Booking) {
    await kyselySql`INSERT INTO slots (slot, who) VALUES (${body.slot}, 'k')`.execute(kyselyDb);
    await kyselyDb.transaction().execute(async (trx) => {
      await kyselySql`select pg_try_advisory_lock(${lockKey(body.slot)})`.execute(trx);
    });
    return { ran: 'kysely' };
  }

  /** The Supabase/Drizzle RLS recipe: a role (or search path) set for a nested transaction. */
  @Post('drizzle/rls')
  @Idempotent()
  async drizzleRls(@Body() body: Booking & { how: string }) {
    const set = {
      'set-local-role': drizzleSql.raw(`set local role ${appRole}`),
      'set-config-role': drizzleSql`select set_config('role', ${appRole}, true)`,
      'set-local-search-path': drizzleSql.raw('set local search_path to app_schema'),
      'set-local-session-authorization': drizzleSql.raw(
        `set local session authorization ${appRole}`,
      ),
    }[body.how]!;
    const who = await drizzleDb.transaction(async (tx) => {
      await tx.execute(set);
      await tx.execute(
        drizzleSql`INSERT INTO public.slots (slot, who) VALUES (${body.slot}, 'rls')`,
      );
      const { rows } = await tx.execute<{ who: string }>(drizzleSql`SELECT current_user AS who`);
      return rows[0].who;
    });
    return { who };
  }

  /**
   * Above READ COMMITTED, held past its heartbeats (every leaseMs / 3): the lease is renewed
   * inside the transaction, with the handler's role set. Its next statement still runs as
   * that role.
   */
  @Post('pg/rls-slow')
  @Idempotent({ isolationLevel: 'SERIALIZABLE', leaseMs: 600 })
  async pgRlsSlow(@Body() body: Booking & { authorization?: boolean }) {
    await pool.query(
      body.authorization
        ? `SET LOCAL SESSION AUTHORIZATION ${appRole}`
        : `SET LOCAL ROLE ${appRole}`,
    );
    await pool.query('SET LOCAL search_path TO app_schema');
    await pool.query('INSERT INTO public.slots (slot, who) VALUES ($1, $2)', [body.slot, 'slow']);
    await sleep(1000);
    const { rows } = await pool.query<{ who: string; path: string }>(
      "SELECT current_user AS who, current_setting('search_path') AS path",
    );
    return rows[0];
  }

  /** The same at the top level of the handler: no nested transaction. */
  @Post('pg/rls-top')
  @Idempotent()
  async pgRlsTop(@Body() body: Booking) {
    await pool.query(`SET LOCAL ROLE ${appRole}`);
    await pool.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'top']);
    await pool.query('SET LOCAL search_path TO app_schema');
    return { slot: body.slot };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PoolController],
  providers: [{ provide: APP_FILTER, useClass: RefusalFilter }],
})
class PoolAppModule {}

/** A pool whose sessions run as a role that may not update the library's table. */
let limitedPool: Pool;
let limitedRole: string;

@Controller()
class LimitedController {
  @Post('limited')
  @Idempotent()
  async limited(@Body() body: Booking & { raise: boolean }) {
    await limitedPool.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'l']);
    // The handler's own role for its own statements; not the library's.
    if (body.raise) await limitedPool.query('SET LOCAL ROLE postgres');
    return { slot: body.slot };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool: limitedPool }),
    }),
  ],
  controllers: [LimitedController],
})
class LimitedAppModule {}

@Controller()
class TypeOrmController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** The mutex recipe on a query runner of the DataSource's. */
  @Post('typeorm/session-lock')
  @Idempotent()
  async sessionLock(@Body() body: Booking) {
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    try {
      await runner.query('SELECT pg_advisory_lock($1)', [lockKey(body.slot)]);
      try {
        const rows = (await runner.query('SELECT 1 FROM slots WHERE slot = $1', [
          body.slot,
        ])) as unknown[];
        if (rows.length > 0) throw new ConflictException(TAKEN);
        await sleep(body.holdMs ?? 0);
        await runner.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'orm']);
      } finally {
        await runner.query('SELECT pg_advisory_unlock($1)', [lockKey(body.slot)]);
      }
      return { booked: body.slot };
    } finally {
      await runner.release();
    }
  }

  @Post('typeorm/advisory')
  @Idempotent()
  async advisory(@Body() body: Booking) {
    await this.dataSource.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 'o']);
    await this.dataSource.query(`SELECT ${body.fn}`);
    return { ran: body.fn };
  }

  @Post('typeorm/rls-slow')
  @Idempotent({ isolationLevel: 'SERIALIZABLE', leaseMs: 600 })
  async rlsSlow(@Body() body: Booking) {
    await this.dataSource.query(`SET LOCAL ROLE ${appRole}`);
    await this.dataSource.query('INSERT INTO slots (slot, who) VALUES ($1, $2)', [body.slot, 's']);
    await sleep(1000);
    const [row] = (await this.dataSource.query('SELECT current_user AS who')) as object[];
    return row;
  }

  @Post('typeorm/rls')
  @Idempotent()
  async rls(@Body() body: Booking & { nested: boolean }) {
    const work = async (manager: { query: DataSource['query'] }) => {
      await manager.query(`SET LOCAL ROLE ${appRole}`);
      await manager.query('SET LOCAL search_path TO app_schema');
      await manager.query('INSERT INTO public.slots (slot, who) VALUES ($1, $2)', [body.slot, 'o']);
    };
    if (body.nested) await this.dataSource.transaction(work);
    else await work(this.dataSource);
    return { slot: body.slot };
  }
}

describe('session state a handler sets on the request’s connection', () => {
  let database: TestDatabase;
  let db: Client;
  let poolApp: INestApplication;
  let ormApp: INestApplication;
  let admin: Client;

  beforeAll(async () => {
    database = await createTestDatabase('seam_session_state');
    appRole = `seam_app_${database.name.slice(-8)}`;
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
    pool = createTestPool({ connectionString: database.url, max: 8 });
    drizzleDb = drizzle({ client: pool });
    kyselyDb = new Kysely({ dialect: new PostgresDialect({ pool }) });
    poolApp = await bootstrapTestApp(PoolAppModule, 'express');

    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: false,
          extra: { max: 8 },
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
      ],
      controllers: [TypeOrmController],
      providers: [{ provide: APP_FILTER, useClass: RefusalFilter }],
    })
    class TypeOrmAppModule {}
    ormApp = await bootstrapTestApp(TypeOrmAppModule, 'express');
  });
  afterAll(async () => {
    await poolApp?.close();
    await ormApp?.close();
    await endTestPool(pool);
    await db?.end();
    await database?.drop();
    admin = new Client({ connectionString: process.env.TEST_DATABASE_URL });
    await admin.connect();
    await admin.query(`DROP ROLE IF EXISTS ${appRole}`);
    await admin.end();
  });

  const rows = async (slot: string) =>
    (await db.query<{ who: string }>('SELECT who FROM slots WHERE slot = $1', [slot])).rows;
  const stored = async (key: string) =>
    (
      await db.query<{ code: number | null }>(
        'SELECT response_code AS code FROM idempotency_keys WHERE key = $1',
        [key],
      )
    ).rows.map((row) => row.code);
  const post = (app: INestApplication, path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  /** Session-level advisory locks held by any session of the test's database. */
  const heldLocks = async () =>
    Number(
      (
        await db.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database
           WHERE l.locktype = 'advisory' AND d.datname = current_database()`,
        )
      ).rows[0].n,
    );

  describe('a session-level advisory lock (item 4)', () => {
    const refusedBody = (fn: string) => ({
      error: 'SessionAdvisoryLockRefusedError',
      message: expect.stringContaining(`${fn} refused`) as unknown,
    });

    it.each([
      ['pg (a connection of the pool)', () => poolApp, '/pg/session-lock'],
      ['TypeORM (a query runner)', () => ormApp, '/typeorm/session-lock'],
    ])(
      'refuses the mutex recipe at its lock on %s: five concurrent bookings of one slot leave no row and no lock, each a final 500 naming pg_advisory_xact_lock',
      async (_name, app, path) => {
        const slot = `mutex-${path}`;
        const answers = await Promise.all(
          Array.from({ length: 5 }, (_, i) =>
            post(app(), path, `${slot}-${i}`, { slot, holdMs: 150 }),
          ),
        );
        expect(answers.map((answer) => answer.status)).toEqual([500, 500, 500, 500, 500]);
        for (const answer of answers) {
          expect(answer.body).toEqual(refusedBody('pg_advisory_lock'));
          expect(answer.body.message).toContain('pg_advisory_xact_lock');
        }
        expect(await rows(slot)).toEqual([]);
        expect(await heldLocks()).toBe(0);
        // Final: the answer is stored, and a retry replays it without running the handler.
        expect(await stored(`${slot}-0`)).toEqual([500]);
        const again = await post(app(), path, `${slot}-0`, { slot, holdMs: 150 });
        expect(again.status).toBe(500);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.text).toBe(answers[0].text);
      },
    );

    it('books one slot once with pg_advisory_xact_lock: one 201, four 409, one row (the control)', async () => {
      const slot = 'xact-lock';
      const answers = await Promise.all(
        Array.from({ length: 5 }, (_, i) =>
          post(poolApp, '/pg/xact-lock', `${slot}-${i}`, { slot, holdMs: 150 }),
        ),
      );
      const statuses = answers.map((answer) => answer.status).sort();
      expect(statuses).toEqual([201, 409, 409, 409, 409]);
      expect(await rows(slot)).toEqual([{ who: 'xact' }]);
      expect(await heldLocks()).toBe(0);
    });

    it.each([
      ['pg_advisory_lock(1)', 'pg_advisory_lock'],
      ['pg_advisory_lock_shared(1)', 'pg_advisory_lock_shared'],
      ['pg_try_advisory_lock(1)', 'pg_try_advisory_lock'],
      ['pg_try_advisory_lock_shared(1)', 'pg_try_advisory_lock_shared'],
      ['pg_advisory_unlock(1)', 'pg_advisory_unlock'],
      ['pg_advisory_unlock_shared(1)', 'pg_advisory_unlock_shared'],
      ['pg_advisory_unlock_all()', 'pg_advisory_unlock_all'],
      ['pg_catalog.pg_advisory_lock(1, 2)', 'pg_advisory_lock'],
    ])(
      'refuses %s through pool.query and TypeORM’s dataSource.query, rolling back the write before it',
      async (fn, name) => {
        for (const [app, path] of [
          [poolApp, '/pg/advisory'],
          [ormApp, '/typeorm/advisory'],
        ] as const) {
          const slot = `fn-${path}-${fn.replace(/[^a-z_]/g, '')}`;
          const answer = await post(app, path, slot, { slot, fn });
          expect(answer.status).toBe(500);
          expect(answer.body).toEqual(refusedBody(name));
          expect(await rows(slot)).toEqual([]);
        }
        expect(await heldLocks()).toBe(0);
      },
    );

    it('answers 500 transaction_aborted, committing nothing, when the handler catches the refusal and answers anyway', async () => {
      const slot = 'caught';
      for (let attempt = 0; attempt < 2; attempt++) {
        const answer = await post(poolApp, '/pg/advisory-caught', slot, { slot });
        expect(answer.status).toBe(500);
        expect(answer.headers['content-type']).toMatch(PROBLEM);
        expect(answer.body).toMatchObject({ code: 'transaction_aborted', status: 500 });
        expect(answer.headers['retry-after']).toBeUndefined();
      }
      expect(await rows(slot)).toEqual([]);
      expect(await heldLocks()).toBe(0);
    });

    it.each([
      ['Drizzle’s sql template (db.execute)', '/drizzle/advisory', 'pg_advisory_lock'],
      ['Kysely’s sql in a transaction', '/kysely/advisory', 'pg_try_advisory_lock'],
    ])('refuses a session lock sent with %s', async (_name, path, fn) => {
      const slot = `layer-${path}`;
      const answer = await post(poolApp, path, slot, { slot });
      expect(answer.status).toBe(500);
      expect(answer.body).toEqual(refusedBody(fn));
      expect(await rows(slot)).toEqual([]);
      expect(await heldLocks()).toBe(0);
    });

    it('runs pg_advisory_xact_lock and the try_ variant, which end with the request', async () => {
      for (const fn of ['pg_advisory_xact_lock(7)', 'pg_try_advisory_xact_lock_shared(7)']) {
        const slot = `xact-${fn}`;
        const answer = await post(poolApp, '/pg/advisory', slot, { slot, fn });
        expect(answer.status).toBe(201);
        const orm = await post(ormApp, '/typeorm/advisory', `orm-${slot}`, {
          slot: `orm-${slot}`,
          fn,
        });
        expect(orm.status).toBe(201);
      }
      expect(await heldLocks()).toBe(0);
    });
  });

  describe('a lasting refusal of the library’s own statement (item 6)', () => {
    let limitedApp: INestApplication;

    beforeAll(async () => {
      limitedRole = `seam_limited_${database.name.slice(-8)}`;
      // The role has every right the start-up check asks for (it refuses to start otherwise,
      // naming the GRANT); the right to complete a key is taken away once the app is up.
      await db.query(`
        CREATE ROLE ${limitedRole} NOLOGIN;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${limitedRole};
        GRANT USAGE ON SEQUENCE slots_id_seq TO ${limitedRole};`);
      limitedPool = createTestPool({ connectionString: database.url, max: 4 });
      // The app's sessions run as the limited role from their start (a session-level SET).
      limitedPool.on('connect', (client) => {
        client.query(`SET ROLE ${limitedRole}`).catch(() => undefined);
      });
      limitedApp = await bootstrapTestApp(LimitedAppModule, 'express');
      // Its keys can be released (a retry runs the request again), never completed.
      await db.query(`
        REVOKE UPDATE ON idempotency_keys FROM ${limitedRole};
        GRANT UPDATE (locked_until) ON idempotency_keys TO ${limitedRole};`);
    });
    afterAll(async () => {
      await limitedApp?.close();
      await endTestPool(limitedPool);
      await db.query(`DROP OWNED BY ${limitedRole}; DROP ROLE ${limitedRole}`);
    });

    it.each([
      ['the handler sets no role', false],
      ['the handler raised its own role (SET LOCAL ROLE postgres)', true],
    ])(
      'answers 500 database_permanent, without Retry-After, when the role the request began with may not update the keys (%s); nothing commits or is stored',
      async (_name, raise) => {
        const slot = `limited-${raise}`;
        for (let attempt = 0; attempt < 2; attempt++) {
          const answer = await post(limitedApp, '/limited', slot, { slot, raise });
          expect(answer.status).toBe(500);
          expect(answer.headers['content-type']).toMatch(PROBLEM);
          expect(answer.headers['retry-after']).toBeUndefined();
          expect(answer.body).toEqual({
            type: 'urn:idempotency:database_permanent',
            title: 'Permanent database error',
            status: 500,
            detail:
              'The database refused the idempotency store for a reason that lasts (a missing ' +
              'table, column or function, a missing privilege, a read-only session, a character ' +
              'it cannot store); nothing was stored. Retrying will not help until the database ' +
              'is fixed.',
            code: 'database_permanent',
          });
          expect(await rows(slot)).toEqual([]);
        }
      },
    );
  });

  it('runs a named statement again after the statement put before it failed (node-postgres had marked it parsed)', async () => {
    const pool = new Pool({ connectionString: database.url, max: 1 });
    const client = await pool.connect();
    try {
      const statement = { name: 'seam_surrounded_1', text: 'SELECT $1::int + 1 AS n', values: [1] };
      await client.query('BEGIN');
      // A role kept at BEGIN that is gone by the commit: the restore fails after its Parse.
      await client.query(
        "SELECT set_config('idempotency.role', 'seam_no_such_role', true), " +
          "set_config('idempotency.authorization', current_setting('session_authorization'), " +
          'true), ' +
          "set_config('idempotency.search_path', '=public', true)",
      );
      await expect(
        runSurrounded(client, statement, 5000, { before: [RESTORE_SESSION_STATE] }),
      ).rejects.toMatchObject({ code: '22023' });
      await client.query('ROLLBACK');
      const { rows } = await runSurrounded(client, { ...statement, values: [5] }, 5000, {});
      expect(rows).toEqual([{ n: 6 }]);
    } finally {
      client.release();
      await pool.end();
    }
  });

  it('runs the statements around an unnamed statement without values (node-postgres would send it as a simple query, skipping them)', async () => {
    // The start-up check's MESSAGES_SCHEMA is such a statement: it must resolve through the
    // pinned path set before it, not the session's own.
    const pool = new Pool({ connectionString: database.url, max: 1 });
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await runSurrounded(
        client,
        { text: "SELECT current_setting('search_path') AS path" },
        5000,
        { before: ['SET LOCAL search_path TO pg_catalog, "seam surrounded"'] },
      );
      expect(rows).toEqual([{ path: 'pg_catalog, "seam surrounded"' }]);
      await client.query('ROLLBACK');
    } finally {
      client.release();
      await pool.end();
    }
  });

  describe('SET LOCAL ROLE and search_path (item 6)', () => {
    it.each([
      ['set-local-role'],
      ['set-config-role'],
      ['set-local-search-path'],
      ['set-local-session-authorization'],
    ])(
      'stores the answer with the library’s own role and search path after %s in a Drizzle transaction: 201, one row, replayed',
      async (how) => {
        const slot = `rls-${how}`;
        const first = await post(poolApp, '/drizzle/rls', slot, { slot, how });
        expect(first.status).toBe(201);
        expect(first.body).toEqual({
          who: how === 'set-local-search-path' ? 'postgres' : appRole,
        });
        const again = await post(poolApp, '/drizzle/rls', slot, { slot, how });
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.text).toBe(first.text);
        expect(await rows(slot)).toEqual([{ who: 'rls' }]);
      },
    );

    it('does the same for SET LOCAL at the top level of the handler', async () => {
      const slot = 'rls-top';
      const first = await post(poolApp, '/pg/rls-top', slot, { slot });
      expect(first.status).toBe(201);
      const again = await post(poolApp, '/pg/rls-top', slot, { slot });
      expect(again.text).toBe(first.text);
      expect(await rows(slot)).toEqual([{ who: 'top' }]);
    });

    it.each([[true], [false]])('does the same on TypeORM (nested: %s)', async (nested) => {
      const slot = `rls-orm-${nested}`;
      const first = await post(ormApp, '/typeorm/rls', slot, { slot, nested });
      expect(first.status).toBe(201);
      const again = await post(ormApp, '/typeorm/rls', slot, { slot, nested });
      expect(again.text).toBe(first.text);
      expect(await rows(slot)).toEqual([{ who: 'o' }]);
    });

    it('renews the lease of a SERIALIZABLE request held past its heartbeats as the request began, and gives the handler its role back', async () => {
      const slot = 'rls-slow';
      const first = await post(poolApp, '/pg/rls-slow', slot, { slot });
      expect(first.status).toBe(201);
      expect(first.body).toEqual({ who: appRole, path: 'app_schema' });
      expect(await rows(slot)).toEqual([{ who: 'slow' }]);
      const orm = await post(ormApp, '/typeorm/rls-slow', `orm-${slot}`, { slot: `orm-${slot}` });
      expect(orm.status).toBe(201);
      expect(orm.body).toEqual({ who: appRole });
      expect(await rows(`orm-${slot}`)).toEqual([{ who: 's' }]);
    });

    it('does the same after SET LOCAL SESSION AUTHORIZATION: renewals and the answer as the request began, the handler’s own back', async () => {
      const slot = 'rls-slow-authorization';
      const first = await post(poolApp, '/pg/rls-slow', slot, { slot, authorization: true });
      expect(first.status).toBe(201);
      expect(first.body).toEqual({ who: appRole, path: 'app_schema' });
      const again = await post(poolApp, '/pg/rls-slow', slot, { slot, authorization: true });
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.text).toBe(first.text);
      expect(await rows(slot)).toEqual([{ who: 'slow' }]);
    });

    it('runs five concurrent RLS requests, each once', async () => {
      const answers = await Promise.all(
        Array.from({ length: 5 }, (_, i) =>
          post(poolApp, '/drizzle/rls', `rls-many-${i}`, {
            slot: `rls-many-${i}`,
            how: 'set-local-role',
          }),
        ),
      );
      expect(answers.map((answer) => answer.status)).toEqual([201, 201, 201, 201, 201]);
      for (let i = 0; i < 5; i++) expect(await rows(`rls-many-${i}`)).toEqual([{ who: 'rls' }]);
    });
  });
});
