import { type INestApplication } from '@nestjs/common';
import { type AddressInfo } from 'node:net';
import { Client, Pool } from 'pg';
import { type OrdersSettings } from '../../../examples/prisma-orders/app.module.js';
import { createOrdersApp } from '../../../examples/prisma-orders/create-app.js';
import { migrate } from '../../../examples/prisma-orders/database/migrate.js';
import { ADAPTERS, type AdapterName } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { startWorker, type WorkerProcess } from '../../support/worker-process.js';
import {
  caughtBySku,
  PrismaProbesController,
} from '../../examples/support/prisma-probes.controller.js';
import { startWarehouse, type Warehouse } from '../../examples/support/warehouse.js';

/**
 * The orders example on Prisma 7 (examples/prisma-orders): Prisma built on the pg.Pool the
 * library is handed, so that its queries and its $transactions join the request's
 * transaction. Each outcome of the TypeORM suites is driven for real (concurrent requests, a
 * killed process, an outer timeout, a serialization failure between two requests, a
 * swallowed failed statement, a lost lease, a crash between phases), with its rows counted;
 * the control builds Prisma on a pool of its own and shows the writes running twice.
 */
const PROBLEM = /^application\/problem\+json/;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Answer {
  status: number;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the JSON of each route
  body: any;
  headers: Headers;
}

async function send(
  base: string,
  path: string,
  options: { key?: string; body?: object; headers?: Record<string, string>; method?: string } = {},
): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method: options.method ?? 'POST',
    headers: {
      'content-type': 'application/json',
      ...(options.key ? { 'idempotency-key': options.key } : {}),
      ...options.headers,
    },
    ...(options.body ? { body: JSON.stringify(options.body) } : {}),
  });
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, text, body, headers: res.headers };
}

/** Retries until the answer is not a 409 (the lease of a request that is still running). */
async function retryUntilSettled(attempt: () => Promise<Answer>): Promise<Answer> {
  let res = await attempt();
  for (let i = 0; i < 100 && res.status === 409; i++) {
    await sleep(100);
    res = await attempt();
  }
  return res;
}

let database: TestDatabase;
let db: Client;
let warehouse: Warehouse;
let n = 0;
const tag = (label: string) => `${label}-${++n}-${Date.now()}`;

beforeAll(async () => {
  database = await createTestDatabase('prisma_orders');
  const pool = new Pool({ connectionString: database.url, max: 1 });
  await migrate(pool);
  await pool.end();
  db = new Client({ connectionString: database.url });
  await db.connect();
  warehouse = await startWarehouse();
});
afterAll(async () => {
  await warehouse?.close();
  await db?.end();
  await database?.drop();
});

const orderRows = async (sku: string) =>
  Number(
    (await db.query<{ n: string }>('SELECT count(*) AS n FROM orders WHERE sku = $1', [sku]))
      .rows[0].n,
  );
const eventRows = async (sku: string, kind = 'placed') =>
  Number(
    (
      await db.query<{ n: string }>(
        `SELECT count(*) AS n FROM order_events e JOIN orders o ON o.id = e.order_id
          WHERE o.sku = $1 AND e.kind = $2`,
        [sku, kind],
      )
    ).rows[0].n,
  );
const keyRow = async (key: string) =>
  (
    await db.query<{ state: string; released: boolean }>(
      `SELECT state, locked_until IS NULL AS released FROM idempotency_keys WHERE key = $1`,
      [key],
    )
  ).rows[0];
/**
 * Waits until a connection of the app sits in an open transaction (the handler has written)
 * whose last statement matches `last` (a LIKE pattern): `%RELEASE SAVEPOINT%` is the end of
 * POST /orders' writes, its nested $transaction's COMMIT.
 */
async function untilWritten(last = '%'): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await db.query(
      `SELECT 1 FROM pg_stat_activity
        WHERE datname = $1 AND pid <> pg_backend_pid() AND state = 'idle in transaction'
          AND query LIKE $2`,
      [database.name, last],
    );
    if (rows.length > 0) return;
    await sleep(10);
  }
  throw new Error('no connection of the app is in a transaction');
}

async function startApp(
  adapter: AdapterName,
  settings: Partial<OrdersSettings> = {},
): Promise<{ app: INestApplication; base: string }> {
  const app = await createOrdersApp(
    {
      databaseUrl: database.url,
      warehouseUrl: warehouse.url,
      testHooks: true,
      controllers: [PrismaProbesController],
      ...settings,
    },
    adapter,
    Boolean(process.env.TEST_LOGS),
  );
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as AddressInfo;
  return { app, base: `http://127.0.0.1:${port}` };
}

/** The example's main.ts as a process of its own, to be killed. */
const startOrdersProcess = (env: Record<string, string> = {}): Promise<WorkerProcess> =>
  startWorker('examples/prisma-orders/main.js', {
    DATABASE_URL: database.url,
    WAREHOUSE_URL: warehouse.url,
    ORDERS_TEST_HOOKS: '1',
    IDEMPOTENCY_LEASE_MS: '1000',
    ...env,
  });

describe.each(ADAPTERS)('the Prisma orders example on %s', (adapter) => {
  let app: INestApplication;
  let base: string;
  beforeAll(async () => ({ app, base } = await startApp(adapter)));
  afterAll(() => app?.close());

  const place = (key: string, body: object, headers?: Record<string, string>) =>
    send(base, '/orders', { key, body, headers });

  it('race: 8 requests with one key place one order; the others are 409 key_in_progress, then replays; 422 key_mismatch', async () => {
    const sku = tag('race');
    const key = `${sku}-key`;
    const body = { sku, quantity: 2 };
    // The owner holds its transaction 500 ms after its writes: the others arrive meanwhile
    // (one that came after its commit would get the replay, as a retry does).
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => place(key, body, { 'x-test-hold-ms': '500' })),
    );
    const created = answers.filter(
      (res) => res.status === 201 && res.headers.get('idempotent-replayed') === null,
    );
    expect(created).toHaveLength(1);
    const others = answers.filter((res) => res !== created[0]);
    expect(others.filter((res) => res.status === 409).length).toBeGreaterThan(0);
    for (const res of others) {
      if (res.status === 201) {
        expect(res.text).toBe(created[0].text);
        continue;
      }
      expect(res.status).toBe(409);
      expect(res.headers.get('content-type')).toMatch(PROBLEM);
      expect(res.body.code).toBe('key_in_progress');
    }
    expect(created[0].body).toEqual({
      id: expect.any(Number),
      sku,
      quantity: 2,
      status: 'placed',
    });
    expect(await orderRows(sku)).toBe(1);
    expect(await eventRows(sku)).toBe(1);
    for (let i = 0; i < 3; i++) {
      const replay = await place(key, body);
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.text).toBe(created[0].text);
    }
    const mismatch = await place(key, { sku, quantity: 3 });
    expect(mismatch.status).toBe(422);
    expect(mismatch.headers.get('content-type')).toMatch(PROBLEM);
    expect(mismatch.body.code).toBe('key_mismatch');
    expect(await orderRows(sku)).toBe(1);
  });

  it('refuses a bad body with 400 and stores nothing', async () => {
    const sku = tag('bad');
    const res = await place(`${sku}-key`, { sku, quantity: 0 });
    expect(res.status).toBe(400);
    expect(await keyRow(`${sku}-key`)).toBeUndefined();
    expect(await orderRows(sku)).toBe(0);
  });

  it('GET /orders/:id reads an order; an unknown id is 404', async () => {
    const sku = tag('get');
    const placed = await place(`${sku}-key`, { sku, quantity: 1 });
    const read = await send(base, `/orders/${placed.body.id}`, { method: 'GET' });
    expect(read.status).toBe(200);
    expect(read.body).toEqual(placed.body);
    expect((await send(base, '/orders/999999999', { method: 'GET' })).status).toBe(404);
  });

  it('a serialization failure between two SERIALIZABLE requests: 503 database_transient, rolled back; the retry runs once', async () => {
    const sku = tag('skew');
    // Both read "no order for this sku"; the first writes and commits, then the second writes.
    const [first, second] = await Promise.all([
      send(base, '/probes/write-skew', { key: `${sku}-a`, body: { sku, waitMs: 0 } }),
      send(base, '/probes/write-skew', { key: `${sku}-b`, body: { sku, waitMs: 700 } }),
    ]);
    expect(first.status).toBe(201);
    expect(first.body).toEqual({ placed: true });
    expect(second.status).toBe(503);
    expect(second.headers.get('content-type')).toMatch(PROBLEM);
    expect(second.headers.get('retry-after')).toBe('1');
    expect(second.body.code).toBe('database_transient');
    expect(await keyRow(`${sku}-b`)).toEqual({ state: 'started', released: true });
    expect(await orderRows(sku)).toBe(1);
    const retry = await send(base, '/probes/write-skew', {
      key: `${sku}-b`,
      body: { sku, waitMs: 700 },
    });
    expect(retry.status).toBe(201);
    expect(retry.body).toEqual({ placed: false });
    expect(await orderRows(sku)).toBe(1);
  });

  it('control: the same two requests at READ COMMITTED both place an order (the write skew)', async () => {
    const sku = tag('skew-rc');
    const level = 'ReadCommitted';
    const answers = await Promise.all([
      send(base, '/probes/write-skew', { key: `${sku}-a`, body: { sku, waitMs: 0, level } }),
      send(base, '/probes/write-skew', { key: `${sku}-b`, body: { sku, waitMs: 700, level } }),
    ]);
    expect(answers.map((res) => res.status)).toEqual([201, 201]);
    expect(await orderRows(sku)).toBe(2);
  });

  it("the handler's connection terminated after its writes (pg_terminate_backend): 503 store_unavailable, rolled back; the retry runs once", async () => {
    const sku = tag('terminated');
    const key = `${sku}-key`;
    const body = { sku, quantity: 1 };
    const first = place(key, body, { 'x-test-hold-ms': '1000' });
    await untilWritten('%RELEASE SAVEPOINT%');
    await db.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = $1 AND pid <> pg_backend_pid() AND state = 'idle in transaction'`,
      [database.name],
    );
    const answer = await first;
    expect(answer.status).toBe(503);
    expect(answer.headers.get('content-type')).toMatch(PROBLEM);
    expect(answer.headers.get('retry-after')).toBe('1');
    expect(answer.body.code).toBe('store_unavailable');
    expect(await orderRows(sku)).toBe(0);
    const retry = await retryUntilSettled(() => place(key, body));
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await orderRows(sku)).toBe(1);
    expect(await eventRows(sku)).toBe(1);
  });

  it("the connection terminated between the handler's statements: its next Prisma query fails; 503 store_unavailable, rolled back", async () => {
    const sku = tag('terminated-between');
    const key = `${sku}-key`;
    const body = { sku, waitMs: 1000 };
    const first = send(base, '/probes/write-wait-write', { key, body });
    await untilWritten('INSERT INTO "public"."orders"%');
    await db.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = $1 AND pid <> pg_backend_pid() AND state = 'idle in transaction'`,
      [database.name],
    );
    const answer = await first;
    // node-postgres' own error, which Prisma's adapter hands on unwrapped.
    expect(caughtBySku.get(sku)).toEqual({
      name: 'Error',
      message: 'Client has encountered a connection error and is not queryable',
    });
    expect(answer.status).toBe(503);
    expect(answer.body.code).toBe('store_unavailable');
    expect(await orderRows(sku)).toBe(0);
    const retry = await retryUntilSettled(() =>
      send(base, '/probes/write-wait-write', { key, body }),
    );
    expect(retry.status).toBe(201);
    expect(await orderRows(sku)).toBe(1);
  });

  it('the backend terminated under a Prisma statement (P2010, SQLSTATE 57P01): 503 store_unavailable, rolled back', async () => {
    const sku = tag('terminated-statement');
    const key = `${sku}-key`;
    const first = send(base, '/probes/slow-statement', { key, body: { sku } });
    let terminated = 0;
    for (let i = 0; i < 500 && terminated === 0; i++) {
      ({ rowCount: terminated } = (await db.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = $1 AND pid <> pg_backend_pid() AND state = 'active'
            AND query LIKE 'SELECT pg_sleep(3)%'`,
        [database.name],
      )) as { rowCount: number });
      if (terminated === 0) await sleep(10);
    }
    expect(terminated).toBe(1);
    const answer = await first;
    expect(answer.status).toBe(503);
    expect(answer.headers.get('retry-after')).toBe('1');
    expect(answer.body.code).toBe('store_unavailable');
    expect(await orderRows(sku)).toBe(0);
    expect(await keyRow(key)).toEqual({ state: 'started', released: true });
  });

  it('a failed statement the handler swallowed: 500 transaction_aborted, nothing stored or committed', async () => {
    const sku = tag('swallow');
    const key = `${sku}-key`;
    for (let attempt = 0; attempt < 2; attempt++) {
      const res = await place(key, { sku, quantity: 1 }, { 'x-test-swallow': '1' });
      expect(res.status).toBe(500);
      expect(res.headers.get('content-type')).toMatch(PROBLEM);
      expect(res.headers.get('idempotent-replayed')).toBeNull();
      expect(res.body).toMatchObject({ code: 'transaction_aborted', status: 500 });
      expect(await orderRows(sku)).toBe(0);
      expect(await eventRows(sku)).toBe(0);
    }
  });

  describe("Prisma's transactions inside a request", () => {
    it('interactive $transaction: a savepoint that commits with the request, or rolls back with it', async () => {
      const sku = tag('interactive');
      const key = `${sku}-key`;
      const first = await send(base, '/probes/fail-after', { key, body: { sku } });
      expect(first.status).toBe(503);
      expect(first.body.code).toBe('retry_later');
      // Prisma sent COMMIT for its $transaction: a RELEASE of a savepoint, so nothing stayed.
      expect(await orderRows(sku)).toBe(0);
      expect(await eventRows(sku)).toBe(0);
      const retry = await send(base, '/probes/fail-after', { key, body: { sku } });
      expect(retry.status).toBe(201);
      expect(retry.body).toEqual({ orders: 1 });
      expect(await orderRows(sku)).toBe(1);
      expect(await eventRows(sku)).toBe(1);
    });

    it('$transaction([...]), the array form (BEGIN, its statements, COMMIT on one connection): joined', async () => {
      const sku = tag('array');
      const key = `${sku}-key`;
      const first = await send(base, '/probes/fail-after', { key, body: { sku, form: 'array' } });
      expect(first.status).toBe(503);
      expect(await orderRows(sku)).toBe(0);
      const retry = await send(base, '/probes/fail-after', { key, body: { sku, form: 'array' } });
      expect(retry.status).toBe(201);
      expect(retry.body).toEqual({ orders: 2 });
      expect(await orderRows(sku)).toBe(2);
    });

    it('a nested $transaction that throws and is caught rolls back alone', async () => {
      const sku = tag('nested');
      const res = await send(base, '/probes/nested-caught', { key: `${sku}-key`, body: { sku } });
      expect(res.status).toBe(201);
      expect(await orderRows(sku)).toBe(1);
      expect(await eventRows(sku, 'placed')).toBe(0);
      expect(await eventRows(sku, 'kept')).toBe(1);
    });

    it("$transaction(fn, { isolationLevel: 'Serializable' }) as the first work: the request's transaction runs at it", async () => {
      const sku = tag('level');
      const res = await send(base, '/probes/isolation-first', { key: `${sku}-key`, body: { sku } });
      expect(res.status).toBe(201);
      expect(res.body).toEqual({ inside: 'serializable', after: 'serializable' });
      expect(await orderRows(sku)).toBe(1);
    });

    it('a stronger level asked for after a write is refused: nothing committed, the refusal stored', async () => {
      const sku = tag('level-late');
      const key = `${sku}-key`;
      const res = await send(base, '/probes/isolation-after-write', { key, body: { sku } });
      // Prisma hands the refusal on as it is (its adapter wraps only the driver's errors).
      expect(caughtBySku.get(sku)).toEqual({
        name: 'IsolationLevelRefusedError',
        message:
          "isolation level refused: the request's transaction already began at READ COMMITTED, " +
          "and PostgreSQL cannot raise a transaction's isolation level once it began. Set it on " +
          "the route, @Idempotent({ isolationLevel: 'SERIALIZABLE' }), or make this transaction " +
          "the handler's first database work",
      });
      // The app has no filter for it: Nest's own 500, stored as the handler's answer.
      expect(res.status).toBe(500);
      expect(res.body).toEqual({ statusCode: 500, message: 'Internal server error' });
      expect(await orderRows(sku)).toBe(0);
      const replay = await send(base, '/probes/isolation-after-write', { key, body: { sku } });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.text).toBe(res.text);
    });

    it("Prisma's own $transaction timeout firing mid-request: its work rolls back, the error is the handler's answer", async () => {
      const sku = tag('tx-timeout');
      const key = `${sku}-key`;
      const res = await send(base, '/probes/tx-timeout', { key, body: { sku, waitMs: 400 } });
      // Prisma rolled its transaction (a savepoint) back when its timer fired, and the next
      // query in it failed with P2028; the handler let it through.
      expect(caughtBySku.get(sku)).toEqual({
        name: 'PrismaClientKnownRequestError',
        message: 'P2028',
      });
      expect(res.status).toBe(500);
      expect(res.body).toEqual({ statusCode: 500, message: 'Internal server error' });
      expect(await orderRows(sku)).toBe(0);
      const replay = await send(base, '/probes/tx-timeout', { key, body: { sku, waitMs: 400 } });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(await orderRows(sku)).toBe(0);
    });

    it("Prisma's $transaction timeout, caught by the handler: only that savepoint rolled back, the request goes on", async () => {
      const sku = tag('tx-timeout-caught');
      const key = `${sku}-key`;
      const body = { sku, waitMs: 400, goOn: true };
      const res = await send(base, '/probes/tx-timeout', { key, body });
      expect(caughtBySku.get(sku)).toEqual({
        name: 'PrismaClientKnownRequestError',
        message: 'P2028',
      });
      // Prisma's ROLLBACK on the request's connection went back to its savepoint alone.
      expect(res.status).toBe(201);
      expect(res.body).toEqual({ orders: 0 });
      expect(await orderRows(sku)).toBe(0);
      expect(await keyRow(key)).toEqual({ state: 'done', released: true });
    });
  });

  describe('an outer timeout (a global timeout() interceptor) shorter than the handler', () => {
    let timed: { app: INestApplication; base: string };
    beforeAll(async () => (timed = await startApp(adapter, { requestTimeoutMs: 500 })));
    afterAll(() => timed?.app.close());

    it('answers 408; nothing is committed while the handler runs, which then commits once with its answer', async () => {
      const sku = tag('outer');
      const key = `${sku}-key`;
      const body = { sku, quantity: 1 };
      const first = await send(timed.base, '/orders', {
        key,
        body,
        headers: { 'x-test-hold-ms': '1200' },
      });
      expect(first.status).toBe(408);
      // The handler has written, and still holds its transaction open: nothing is visible.
      expect(await orderRows(sku)).toBe(0);
      const retry = await retryUntilSettled(() => send(timed.base, '/orders', { key, body }));
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body).toMatchObject({ sku, quantity: 1, status: 'placed' });
      expect(await orderRows(sku)).toBe(1);
      expect(await eventRows(sku)).toBe(1);
    });
  });

  describe('a lease lost while the handler runs (no heartbeat, a 500 ms lease)', () => {
    let short: { app: INestApplication; base: string };
    beforeAll(async () => (short = await startApp(adapter, { leaseMs: 500, heartbeat: false })));
    afterAll(() => short?.app.close());

    it('the stale worker ends 409 lease_lost with nothing committed; the new owner’s answer is stored', async () => {
      const sku = tag('lease');
      const key = `${sku}-key`;
      const body = { sku, quantity: 1 };
      const stale = send(short.base, '/orders', {
        key,
        body,
        headers: { 'x-test-hold-ms': '1500' },
      });
      await untilWritten(); // the stale handler has written, and waits
      await sleep(700); // its lease (500 ms) is over
      const owner = await send(short.base, '/orders', { key, body });
      const staleAnswer = await stale;
      expect(owner.status).toBe(201);
      expect(staleAnswer.status).toBe(409);
      expect(staleAnswer.headers.get('content-type')).toMatch(PROBLEM);
      expect(staleAnswer.body.code).toBe('lease_lost');
      expect(await orderRows(sku)).toBe(1);
      expect(await eventRows(sku)).toBe(1);
      const replay = await send(short.base, '/orders', { key, body });
      expect(replay.text).toBe(owner.text);
    });
  });
});

describe('the Prisma orders example as processes that are killed', () => {
  let app: INestApplication;
  let base: string;
  beforeAll(async () => ({ app, base } = await startApp('express')));
  afterAll(() => app?.close());

  it('a process killed past its writes: nothing committed; another instance takes the retry over once', async () => {
    const worker = await startOrdersProcess();
    const sku = tag('crash');
    const key = `${sku}-key`;
    const body = { sku, quantity: 3 };
    const doomed = send(worker.url, '/orders', {
      key,
      body,
      headers: { 'x-test-hold-ms': '5000' },
    }).catch((error: unknown) => error);
    await untilWritten('%RELEASE SAVEPOINT%');
    await worker.kill('SIGKILL');
    await doomed;
    expect(await orderRows(sku)).toBe(0);
    const retry = await retryUntilSettled(() => send(base, '/orders', { key, body }));
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await orderRows(sku)).toBe(1);
    expect(await eventRows(sku)).toBe(1);
  });

  it('phases: killed while the warehouse call is in flight, the retry resumes; one derived key, one tracking number', async () => {
    const sku = tag('ship');
    const placed = await send(base, '/orders', { key: `${sku}-place`, body: { sku, quantity: 1 } });
    expect(placed.status).toBe(201);
    const path = `/orders/${placed.body.id}/ship`;
    const key = `${sku}-ship`;
    const worker = await startOrdersProcess();
    const callsBefore = warehouse.calls.length;
    warehouse.hold();
    const doomed = send(worker.url, path, { key }).catch((error: unknown) => error);
    try {
      await warehouse.received(callsBefore + 1);
      // 'reserved' has committed with its recovery point; 'shipped' waits on the warehouse.
      const { rows } = await db.query<{ status: string }>(
        'SELECT status FROM orders WHERE id = $1',
        [placed.body.id],
      );
      expect(rows).toEqual([{ status: 'reserved' }]);
      await worker.kill('SIGKILL');
      await doomed;
    } finally {
      warehouse.release();
    }
    const shipped = await retryUntilSettled(() => send(base, path, { key }));
    expect(shipped.status).toBe(200);
    const calls = warehouse.calls.slice(callsBefore).map((call) => call.key);
    expect(calls).toHaveLength(2); // the killed call, and the resumed one
    expect(new Set(calls).size).toBe(1); // with the same derived key
    const trackingNumber = warehouse.shipments.get(calls[0]);
    expect(shipped.body).toEqual({ id: placed.body.id, status: 'shipped', trackingNumber });
    const { rows } = await db.query('SELECT status, tracking_number FROM orders WHERE id = $1', [
      placed.body.id,
    ]);
    expect(rows).toEqual([{ status: 'shipped', tracking_number: trackingNumber }]);
    const replay = await send(base, path, { key });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.text).toBe(shipped.text);
    expect(warehouse.calls.length - callsBefore).toBe(2);
  });

  it('control: Prisma on a pool of its own commits apart, so the same crash and retry place the order twice', async () => {
    const worker = await startOrdersProcess({ ORDERS_PRISMA_OWN_POOL: '1' });
    const sku = tag('control');
    const key = `${sku}-key`;
    const body = { sku, quantity: 3 };
    const doomed = send(worker.url, '/orders', {
      key,
      body,
      headers: { 'x-test-hold-ms': '5000' },
    }).catch((error: unknown) => error);
    // Committed on its own as soon as it was written: visible while the handler still waits.
    for (let i = 0; i < 500 && (await eventRows(sku)) === 0; i++) await sleep(10);
    await worker.kill('SIGKILL');
    await doomed;
    expect(await orderRows(sku)).toBe(1);
    const retry = await retryUntilSettled(() => send(base, '/orders', { key, body }));
    expect(retry.status).toBe(201);
    expect(await orderRows(sku)).toBe(2);
  });
});
