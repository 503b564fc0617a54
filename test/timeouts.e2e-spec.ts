import { type INestApplication } from '@nestjs/common';
import { createServer, type Server } from 'node:net';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { IdempotencyStoreUnavailableError, ProcessedMessages } from '../lib/index.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { type ResolvedIdempotencyOptions } from '../lib/shapes/idempotency-options.interface.js';
import request from 'supertest';
import { ADAPTERS } from './support/bootstrap.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { StallingProxy } from './support/stalling-proxy.js';
import { TcpProxy } from './support/tcp-proxy.js';
import {
  createTimeoutsApp,
  downstreamCalls,
  type Meet,
  TIMEOUTS_DDL,
  type WorkBody,
} from './support/timeouts-app.js';

/**
 * Every timeout a handler can meet, for real: PostgreSQL's own (`statement_timeout`,
 * `lock_timeout`, `idle_in_transaction_session_timeout`), node-postgres' (`query_timeout`,
 * the pool's `connectionTimeoutMillis`) and the module's `databaseTimeoutMs`, in the handler
 * and at the fenced COMMIT. None is final: each is a 503 with nothing stored, and the retry
 * runs the work once, or replays it when the COMMIT whose answer was lost had in fact run.
 */
const PROBLEM = /^application\/problem\+json/;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** The module's bound on each wait for PostgreSQL, in the app that uses it. */
const DATABASE_TIMEOUT_MS = 1500;
/** node-postgres' `query_timeout` and the pool's `connectionTimeoutMillis`, in the other. */
const QUERY_TIMEOUT_MS = 1000;
const CONNECTION_TIMEOUT_MS = 500;

type AppName = 'deadline' | 'driver';

// One database for both adapters' apps: their tags never meet.
let database: MigratedDatabase;
let db: Client;
beforeAll(async () => {
  database = await createMigratedDatabase('timeouts');
  await database.dataSource.query(TIMEOUTS_DDL);
  db = new Client({ connectionString: database.url });
  await db.connect();
});
afterAll(async () => {
  await db?.end();
  await database?.drop();
});

describe.each(ADAPTERS)('timeouts a handler meets, on %s', (adapter) => {
  let proxy: StallingProxy;
  const apps = {} as Record<AppName, INestApplication>;
  let n = 0;
  const tag = (label: string) => `${label}-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    const target = new URL(database.url);
    proxy = new StallingProxy(target.hostname, Number(target.port || 5432));
    await proxy.start();
    const viaProxy = new URL(database.url);
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(proxy.port);
    apps.deadline = await createTimeoutsApp({
      databaseUrl: viaProxy.toString(),
      adapter,
      idempotency: { databaseTimeoutMs: DATABASE_TIMEOUT_MS },
    });
    apps.driver = await createTimeoutsApp({
      databaseUrl: viaProxy.toString(),
      adapter,
      pool: { query_timeout: QUERY_TIMEOUT_MS, connectionTimeoutMillis: CONNECTION_TIMEOUT_MS },
    });
  });
  afterAll(async () => {
    await apps.deadline?.close();
    await apps.driver?.close();
    await proxy?.stop();
  });

  const post = (app: AppName, path: string, body: { tag: string }) =>
    request(apps[app].getHttpServer()).post(path).set('Idempotency-Key', body.tag).send(body);
  const rows = async (tagged: string) =>
    Number(
      (await db.query<{ n: string }>('SELECT count(*) AS n FROM work WHERE tag = $1', [tagged]))
        .rows[0].n,
    );
  /** The port PostgreSQL sees the app's connection in `state` come from, once there is one. */
  const connectionIn = async (state: string, query = '%'): Promise<number> => {
    for (let i = 0; i < 500; i++) {
      const { rows: found } = await db.query<{ client_port: number }>(
        `SELECT client_port FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = $1
           AND query LIKE $2`,
        [state, query],
      );
      // The app's, through the proxy: a session of the library's own pool (direct) may pass
      // through the same state for a moment.
      const proxied = found.filter((row) => proxy.carries(row.client_port));
      if (proxied.length === 1) return proxied[0].client_port;
      await sleep(10);
    }
    throw new Error(`no single connection ${state}`);
  };
  /** Waits until PostgreSQL has ended the session that came from `port`. */
  const gone = async (port: number) => {
    for (let i = 0; i < 500; i++) {
      const { rowCount } = await db.query('SELECT 1 FROM pg_stat_activity WHERE client_port = $1', [
        port,
      ]);
      if (rowCount === 0) return;
      await sleep(10);
    }
    throw new Error(`the session from port ${port} is still there`);
  };
  const expectProblem = (
    res: request.Response,
    status: number,
    code: string,
    retryAfter?: string,
  ) => {
    expect({
      status: res.status,
      code: res.body.code,
      retryAfter: res.headers['retry-after'],
    }).toEqual({ status, code, retryAfter });
    expect(res.headers['content-type']).toMatch(PROBLEM);
  };

  describe('in the handler', () => {
    it.each<[string, string, AppName, Meet]>([
      ['statement_timeout (57014)', 'database_transient', 'deadline', 'statement_timeout'],
      ['lock_timeout (55P03)', 'database_transient', 'deadline', 'lock_timeout'],
      [
        'idle_in_transaction_session_timeout (the server closes the connection)',
        'store_unavailable',
        'deadline',
        'idle_in_transaction',
      ],
      [
        'databaseTimeoutMs, waiting for a connection',
        'store_unavailable',
        'deadline',
        'starved_pool',
      ],
      ["node-postgres' query_timeout", 'store_unavailable', 'driver', 'query_timeout'],
      ["the pool's connectionTimeoutMillis", 'store_unavailable', 'driver', 'starved_pool'],
    ])(
      '%s: 503 %s, Retry-After 1, nothing stored; the retry runs once',
      async (_n, code, app, meet) => {
        const body: WorkBody = { tag: tag(meet), meet };
        // Another connection holds the row the lock_timeout handler asks for.
        const holder = new Client({ connectionString: database.url });
        await holder.connect();
        await holder.query('BEGIN');
        if (meet === 'lock_timeout')
          await holder.query('SELECT id FROM locks WHERE id = 1 FOR UPDATE');
        try {
          const first = await post(app, '/work', body);
          expectProblem(first, 503, code, '1');
        } finally {
          await holder.query('COMMIT');
          await holder.end();
        }
        expect(await rows(body.tag)).toBe(0);

        const retry = await post(app, '/work', body);
        expect(retry.status).toBe(201);
        expect(retry.headers['idempotent-replayed']).toBeUndefined();
        expect(await rows(body.tag)).toBe(1);
        const replay = await post(app, '/work', body);
        expect(replay.status).toBe(201);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(await rows(body.tag)).toBe(1);
      },
    );
  });

  describe('at the fenced COMMIT, whose outcome is unknown', () => {
    it.each<[string, AppName, 'requests' | 'replies', boolean]>([
      ['databaseTimeoutMs; the COMMIT never reached PostgreSQL', 'deadline', 'requests', false],
      ['databaseTimeoutMs; the COMMIT ran, its answer was lost', 'deadline', 'replies', true],
      ['query_timeout; the COMMIT never reached PostgreSQL', 'driver', 'requests', false],
      ['query_timeout; the COMMIT ran, its answer was lost', 'driver', 'replies', true],
    ])(
      '%s: 503 store_unavailable; the retry finds it done or not, once',
      async (_n, app, direction, ran) => {
        const body: WorkBody = { tag: tag(`commit-${direction}`), meet: 'pause', pauseMs: 1000 };
        const answer = post(app, '/work', body).then((res) => res);
        // Written, not committed: its connection is stalled before the handler returns.
        const port = await connectionIn('idle in transaction');
        proxy.stall(port, direction);
        try {
          expectProblem(await answer, 503, 'store_unavailable', '1');
        } finally {
          // The app gave that connection up; the path's end closes it on PostgreSQL's side too.
          proxy.cut(port);
          await gone(port);
        }
        expect(await rows(body.tag)).toBe(ran ? 1 : 0);

        const retry = await post(app, '/work', body);
        expect(retry.status).toBe(201);
        expect(retry.body).toEqual({ tag: body.tag });
        expect(retry.headers['idempotent-replayed']).toBe(ran ? 'true' : undefined);
        expect(await rows(body.tag)).toBe(1);
      },
    );
  });

  describe('ECONNRESET: from the database, or from the handler’s own HTTP call', () => {
    let resetting: Server;
    let resetUrl: string;
    beforeAll(async () => {
      // A downstream system that resets every connection it gets.
      resetting = createServer((socket) => socket.resetAndDestroy());
      await new Promise<void>((resolve) => resetting.listen(0, '127.0.0.1', resolve));
      resetUrl = `http://127.0.0.1:${(resetting.address() as { port: number }).port}/charge`;
    });
    afterAll(() => new Promise<void>((resolve) => resetting.close(() => resolve())));

    it('the database connection reset under a statement: 503 store_unavailable, the retry runs once', async () => {
      const body: WorkBody = { tag: tag('db-reset'), meet: 'slow_statement' };
      const answer = post('deadline', '/work', body).then((res) => res);
      proxy.reset(await connectionIn('active', '%pg_sleep%'));
      expectProblem(await answer, 503, 'store_unavailable', '1');
      expect(await rows(body.tag)).toBe(0);
      const retry = await post('deadline', '/work', body);
      expect(retry.status).toBe(201);
      expect(await rows(body.tag)).toBe(1);
    });

    it('the handler’s own HTTP call reset: its 500 is final, stored and replayed, the call made once', async () => {
      const body = { tag: tag('http-reset'), url: resetUrl };
      const first = await post('deadline', '/downstream', body);
      expect(first.status).toBe(500);
      expect(first.body).toEqual({ statusCode: 500, message: 'Internal server error' });
      expect(first.headers['retry-after']).toBeUndefined();
      const replay = await post('deadline', '/downstream', body);
      expect(replay.status).toBe(500);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.body).toEqual(first.body);
      expect(downstreamCalls.get(body.tag)).toBe(1);
      // Its write rolled back with it: a final error keeps none of the handler's effects.
      expect(await rows(body.tag)).toBe(0);
    });
  });
});

/**
 * A connection PostgreSQL refuses, reached through TypeORM's own `connect()` (a consumer's
 * transaction): TypeORM hands the socket's ECONNREFUSED on as it is, so only the caller knows
 * it is the database's. It must stay "deliver it again", never the effect's own failure.
 */
describe('ECONNREFUSED from the database through TypeORM’s connect', () => {
  let proxy: TcpProxy;
  let viaProxy: DataSource;
  beforeAll(async () => {
    const target = new URL(database.url);
    proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await proxy.start();
    const url = new URL(database.url);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    viaProxy = new DataSource({ type: 'postgres', url: url.toString(), connectTimeoutMS: 2000 });
    await viaProxy.initialize();
  });
  afterAll(async () => {
    await viaProxy?.destroy();
    await proxy?.stop();
  });

  it('is store_unavailable (deliver it again) for a consumer, not the effect’s failure; once back, it applies', async () => {
    const messages = new ProcessedMessages(
      new IdempotencyDatabase(() => viaProxy, 5000),
      {} as ResolvedIdempotencyOptions,
    );
    await proxy.refuse();
    // The pool drops the connections the proxy cut: the next one is a new, refused one.
    const pool = (viaProxy.driver as unknown as { master: { totalCount: number } }).master;
    for (let i = 0; i < 200 && pool.totalCount > 0; i++) await sleep(10);
    expect(pool.totalCount).toBe(0);
    const down = messages.processOnce('timeouts', 'refused', () => Promise.resolve('applied'));
    await expect(down).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
    // The socket's error, marked as the database's where the library connected.
    await expect(down).rejects.toMatchObject({
      code: 'store_unavailable',
      cause: { name: 'DatabaseConnectionError', cause: { code: 'ECONNREFUSED' } },
    });
    await proxy.restore();
    const back = await messages.processOnce('timeouts', 'refused', () =>
      Promise.resolve('applied'),
    );
    expect(back).toEqual({ duplicate: false, result: 'applied' });
  });
});
