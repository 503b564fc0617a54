import { jest } from '@jest/globals';
import { ConsoleLogger, type INestApplication, Logger } from '@nestjs/common';
import { Client } from 'pg';
import request from 'supertest';
import { IdempotencyDatabase, type IdempotencyModuleBaseOptions } from '../../lib/index.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { startPgBouncer, type TestPgBouncer } from '../support/pgbouncer.js';
import { ADAPTERS, createTestApp, SIDE_EFFECTS_DDL } from '../support/test-app.js';

/**
 * The app behind a real PgBouncer in transaction pooling mode, as most production PostgreSQL
 * is reached: two server connections for the app's ten, so that consecutive transactions of
 * one app connection land on different server connections, and those of different app
 * connections on the same one.
 */
const PROBLEM = /^application\/problem\+json/;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The module's options behind a transaction pooler. */
const BEHIND_POOLER: IdempotencyModuleBaseOptions = {
  leaseMs: 1500,
  // The takeover case needs a live worker whose lease runs out.
  heartbeat: false,
  pooler: 'transaction',
};

describe.each(ADAPTERS)('behind PgBouncer in transaction mode, on %s', (adapter) => {
  let database: TestDatabase;
  let bouncer: TestPgBouncer;
  let db: Client;
  let app: INestApplication;
  let n = 0;
  const newKey = () => `pool-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    database = await createTestDatabase(`pgbouncer_${adapter}`);
    db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(SIDE_EFFECTS_DDL);
    bouncer = await startPgBouncer({ poolMode: 'transaction', poolSize: 2 });
    app = await createTestApp({
      databaseUrl: bouncer.url(database.name),
      adapter,
      idempotency: BEHIND_POOLER,
    });
  });
  afterAll(async () => {
    await app?.close();
    await bouncer?.stop();
    await db?.end();
    await database?.drop();
  });

  const post = (path: string, key: string) =>
    request(app.getHttpServer()).post(path).set('X-Tenant-Id', '1').set('Idempotency-Key', key);
  const sideEffects = async (amount: number) =>
    Number(
      (
        await db.query<{ n: string }>(
          'SELECT count(*) AS n FROM side_effects WHERE route = $1 AND amount = $2',
          ['orders', amount],
        )
      ).rows[0].n,
    );

  it('runs 30 keys from 10 clients at once, each once, and replays each byte for byte', async () => {
    const amounts = Array.from({ length: 30 }, (_, i) => 1000 + n * 100 + i);
    const keys = amounts.map(() => newKey());
    const first = await Promise.all(
      amounts.map((amount, i) => post('/orders', keys[i]).send({ amount })),
    );
    const again = await Promise.all(
      amounts.map((amount, i) => post('/orders', keys[i]).send({ amount })),
    );
    expect(first.map((r) => r.status)).toEqual(amounts.map(() => 201));
    expect(again.map((r) => r.status)).toEqual(amounts.map(() => 201));
    expect(again.map((r) => r.headers['idempotent-replayed'])).toEqual(amounts.map(() => 'true'));
    expect(again.map((r) => r.text)).toEqual(first.map((r) => r.text));
    for (const amount of amounts) expect(await sideEffects(amount)).toBe(1);
  });

  /** Each case runs for this many keys at once, so that their statements share connections. */
  const AT_ONCE = 10;
  const each = <T>(run: (i: number) => Promise<T>) =>
    Promise.all(Array.from({ length: AT_ONCE }, (_, i) => run(i)));

  it('answers 422 key_mismatch for a key reused with another body', async () => {
    const keys = await each(async () => newKey());
    const first = await each((i) => post('/orders', keys[i]).send({ amount: 5 }));
    const other = await each((i) => post('/orders', keys[i]).send({ amount: 6 }));
    expect(first.map((r) => r.status)).toEqual(keys.map(() => 201));
    expect(other.map((r) => r.status)).toEqual(keys.map(() => 422));
    for (const answer of other) {
      expect(answer.headers['content-type']).toMatch(PROBLEM);
      expect(answer.body).toMatchObject({ status: 422, code: 'key_mismatch' });
    }
  });

  it('stores the 500 of a handler that failed after its write, its write rolled back', async () => {
    const amount = 70_000 + n;
    const keys = await each(async () => newKey());
    const first = await each((i) => post('/crash', keys[i]).send({ amount }));
    const again = await each((i) => post('/crash', keys[i]).send({ amount }));
    expect(first.map((r) => r.status)).toEqual(keys.map(() => 500));
    expect(again.map((r) => r.status)).toEqual(keys.map(() => 500));
    expect(again.map((r) => r.headers['idempotent-replayed'])).toEqual(keys.map(() => 'true'));
    expect(again.map((r) => r.text)).toEqual(first.map((r) => r.text));
    const { rows } = await db.query<{ n: string }>(
      "SELECT count(*) AS n FROM side_effects WHERE route = 'crash' AND amount = $1",
      [amount],
    );
    expect(Number(rows[0].n)).toBe(0);
  });

  it('answers 409 while a lease is held, takes expired leases over, and fences the slow workers', async () => {
    const amounts = await each(async (i) => 50_000 + n * 100 + i);
    const keys = await each(async () => newKey());
    const send = (i: number) =>
      post('/orders', keys[i]).send({ amount: amounts[i], delayMs: 3000 });
    // Slower than the 1.5 s lease: their claims expire while they run.
    const slow = each((i) => send(i).then((r) => r));
    await sleep(300);
    const during = await each(send);
    await sleep(1700);
    const takenOver = await each(send);
    const slowAnswers = await slow;
    expect(during.map((r) => r.status)).toEqual(keys.map(() => 409));
    for (const answer of during) {
      expect(answer.body).toMatchObject({ status: 409, code: 'key_in_progress' });
      expect(answer.headers['retry-after']).toMatch(/^\d+$/);
    }
    expect(takenOver.map((r) => r.status)).toEqual(keys.map(() => 201));
    expect(takenOver.map((r) => r.headers['idempotent-replayed'])).toEqual(
      keys.map(() => undefined),
    );
    // The slow workers' writes and answers did not commit: they lost their keys.
    expect(slowAnswers.map((r) => r.status)).toEqual(keys.map(() => 409));
    for (const answer of slowAnswers) expect(answer.body).toMatchObject({ code: 'lease_lost' });
    for (const amount of amounts) expect(await sideEffects(amount)).toBe(1);
    const replays = await each(send);
    expect(replays.map((r) => r.headers['idempotent-replayed'])).toEqual(keys.map(() => 'true'));
    expect(replays.map((r) => r.text)).toEqual(takenOver.map((r) => r.text));
  }, 30_000);
});

describe.each(ADAPTERS)(
  'a store timeout behind PgBouncer in transaction mode, on %s',
  (adapter) => {
    let database: TestDatabase;
    let bouncer: TestPgBouncer;
    let db: Client;
    let app: INestApplication;

    beforeAll(async () => {
      database = await createTestDatabase(`pgbouncer_cancel_${adapter}`);
      db = new Client({ connectionString: database.url });
      await db.connect();
      await db.query(SIDE_EFFECTS_DDL);
      bouncer = await startPgBouncer({ poolMode: 'transaction', poolSize: 2 });
      app = await createTestApp({
        databaseUrl: bouncer.url(database.name),
        adapter,
        idempotency: { pooler: 'transaction', databaseTimeoutMs: 300 },
      });
    });
    afterAll(async () => {
      await app?.close();
      await bouncer?.stop();
      await db?.end();
      await database?.drop();
    });

    it('cancels the claim on the server through PgBouncer: it never commits after its 503', async () => {
      const key = `cancel-${adapter}-${Date.now()}`;
      const locker = new Client({ connectionString: database.url });
      await locker.connect();
      try {
        await locker.query('BEGIN');
        await locker.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
        const first = await request(app.getHttpServer())
          .post('/orders')
          .set('Idempotency-Key', key)
          .send({ amount: 9 });
        expect(first.status).toBe(503);
        expect(first.body).toMatchObject({ status: 503, code: 'store_unavailable' });
        await sleep(200);
        // PgBouncer routes a cancel request by the client connection it names: it must arrive
        // while that connection is open, or the claim waits on, and commits once unlocked.
        const { rows: waiting } = await db.query(
          `SELECT query FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'`,
          [database.name],
        );
        expect(waiting).toEqual([]);
        await locker.query('ROLLBACK');
      } finally {
        await locker.end();
      }
      await sleep(200);
      const { rows } = await db.query('SELECT state FROM idempotency_keys WHERE key = $1', [key]);
      expect(rows).toEqual([]);
      const retry = await request(app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', key)
        .send({ amount: 9 });
      expect(retry.status).toBe(201);
    });
  },
);

describe.each(ADAPTERS)(
  "behind PgBouncer in transaction mode with pooler: 'session' (a pooler the probe does not question), on %s",
  (adapter) => {
    let database: TestDatabase;
    let bouncer: TestPgBouncer;
    let app: INestApplication;

    beforeAll(async () => {
      database = await createTestDatabase(`pgbouncer_misfit_${adapter}`);
      const db = new Client({ connectionString: database.url });
      await db.connect();
      await db.query(SIDE_EFFECTS_DDL);
      await db.end();
      bouncer = await startPgBouncer({ poolMode: 'transaction', poolSize: 2 });
      app = await createTestApp({
        databaseUrl: bouncer.url(database.name),
        adapter,
        idempotency: { pooler: 'session' },
      });
    });
    afterAll(async () => {
      await app?.close();
      await bouncer?.stop();
      await database?.drop();
    });

    it('answers 500 store_misconfigured, never a 503 to retry, and logs what to change', async () => {
      const logged: string[] = [];
      Logger.overrideLogger({
        log: () => undefined,
        warn: () => undefined,
        error: (message: unknown) => logged.push(String(message)),
      });
      try {
        const answers = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            request(app.getHttpServer())
              .post('/orders')
              .set('Idempotency-Key', `misfit-${adapter}-${i}-${Date.now()}`)
              .send({ amount: i + 1 }),
          ),
        );
        const statuses = answers.map((r) => r.status);
        // Those that met no misfit ran (the first of each session); none is a passing outage.
        expect(statuses.filter((status) => status !== 201 && status !== 500)).toEqual([]);
        const misfits = answers.filter((r) => r.status === 500);
        expect(misfits.length).toBeGreaterThan(0);
        for (const answer of misfits) {
          expect(answer.headers['content-type']).toMatch(PROBLEM);
          expect(answer.headers['retry-after']).toBeUndefined();
          expect(answer.body).toEqual({
            type: 'urn:idempotency:store_misconfigured',
            title: 'Idempotency store misconfigured',
            status: 500,
            code: 'store_misconfigured',
            detail:
              'The idempotency store cannot run on its database connection as configured; ' +
              'nothing was stored. Retrying will not help until the server is reconfigured.',
          });
        }
        expect(logged).toContainEqual(
          expect.stringMatching(
            /^prepared statement "idempotency_\w+" (already exists \(SQLSTATE 42P05\)|does not exist \(SQLSTATE 26000\)): .*Set pooler: 'transaction' in IdempotencyModule\.forRoot\(\)/,
          ),
        );
      } finally {
        Logger.overrideLogger(process.env.TEST_LOGS ? new ConsoleLogger() : false);
      }
    });
  },
);

describe.each(ADAPTERS)('behind PgBouncer in session mode, on %s', (adapter) => {
  let database: TestDatabase;
  let bouncer: TestPgBouncer;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`pgbouncer_session_${adapter}`);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(SIDE_EFFECTS_DDL);
    await db.end();
    // A server session per app connection, for the connection's life (the app's pool is 10).
    bouncer = await startPgBouncer({ poolMode: 'session', poolSize: 10 });
    app = await createTestApp({
      databaseUrl: bouncer.url(database.name),
      adapter,
      idempotency: { pooler: 'session' },
    });
  });
  afterAll(async () => {
    await app?.close();
    await bouncer?.stop();
    await database?.drop();
  });

  it('runs 30 keys at once with named statements, each once, and replays each', async () => {
    const keys = Array.from({ length: 30 }, (_, i) => `session-${adapter}-${i}-${Date.now()}`);
    const send = (key: string, i: number) =>
      request(app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', key)
        .send({ amount: i + 1 });
    const first = await Promise.all(keys.map(send));
    const again = await Promise.all(keys.map(send));
    expect(first.map((r) => r.status)).toEqual(keys.map(() => 201));
    expect(again.map((r) => r.headers['idempotent-replayed'])).toEqual(keys.map(() => 'true'));
    expect(again.map((r) => r.text)).toEqual(first.map((r) => r.text));
  });
});

/**
 * With no `pooler` set, the library asks the first connection at start-up: the process id a
 * connection is announced with is PostgreSQL's own pid directly, and a key of PgBouncer's own
 * through it (in session and transaction modes alike). It must never misfire on PostgreSQL.
 */
describe('the pooler probe at start-up (no pooler set)', () => {
  let database: TestDatabase;
  const bouncers: TestPgBouncer[] = [];
  const apps: INestApplication[] = [];
  let said: jest.SpiedFunction<Logger['log']>;

  beforeAll(async () => {
    database = await createTestDatabase('pgbouncer_probe');
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(SIDE_EFFECTS_DDL);
    await db.end();
  });
  beforeEach(() => {
    // What the library says, whatever logger the app has (the test apps print nothing).
    said = jest.spyOn(Logger.prototype, 'log');
  });
  afterEach(async () => {
    said.mockRestore();
    for (const app of apps.splice(0)) await app.close();
    for (const bouncer of bouncers.splice(0)) await bouncer.stop();
  });
  afterAll(async () => {
    await database?.drop();
  });

  const bouncer = async (poolMode: 'session' | 'transaction') => {
    const started = await startPgBouncer({ poolMode, poolSize: poolMode === 'session' ? 10 : 2 });
    bouncers.push(started);
    return started.url(database.name);
  };
  const start = async (databaseUrl: string, idempotency: IdempotencyModuleBaseOptions = {}) => {
    const app = await createTestApp({ databaseUrl, adapter: 'express', idempotency });
    apps.push(app);
    return app;
  };
  const adapted = () =>
    said.mock.calls
      .map(([message]) => String(message))
      .filter((line) => line.includes('through a connection pooler'));

  it('directly on PostgreSQL: no pooler, named statements, nothing said', async () => {
    const app = await start(database.url);
    expect(app.get(IdempotencyDatabase).pooler).toBe('none');
    expect(app.get(IdempotencyDatabase).namedStatements).toBe(true);
    const res = await request(app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', `probe-direct-${Date.now()}`)
      .send({ amount: 1 });
    expect(res.status).toBe(201);
    expect(adapted()).toEqual([]);
  });

  it.each(['transaction', 'session'] as const)(
    'behind PgBouncer in %s mode: runs as with pooler: transaction, and says so once',
    async (mode) => {
      const app = await start(await bouncer(mode));
      expect(app.get(IdempotencyDatabase).pooler).toBe('transaction');
      expect(app.get(IdempotencyDatabase).namedStatements).toBe(false);
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          request(app.getHttpServer())
            .post('/orders')
            .set('Idempotency-Key', `probe-${mode}-${i}-${Date.now()}`)
            .send({ amount: 100 + i }),
        ),
      );
      expect(answers.map((r) => r.status)).toEqual(answers.map(() => 201));
      expect(adapted()).toEqual([
        expect.stringMatching(
          /^the database connection goes through a connection pooler \(it was announced as process -?\d+ and is served by \d+: PgBouncer's signature.*Set pooler: 'transaction'/,
        ),
      ]);
    },
  );

  it("pooler: 'none' behind PgBouncer: the app refuses to start, saying which setting to use", async () => {
    const url = await bouncer('transaction');
    await expect(start(url, { pooler: 'none' })).rejects.toThrow(
      /^pooler: 'none' says the app connects to PostgreSQL directly, but its connection goes through a connection pooler \(announced as process -?\d+, served by \d+\)\. Set pooler: 'transaction' in IdempotencyModule\.forRoot\(\)/,
    );
  });
});
