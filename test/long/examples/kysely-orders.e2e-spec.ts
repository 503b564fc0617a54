import { type INestApplication } from '@nestjs/common';
import { Client, Pool } from 'pg';
import request from 'supertest';
import { applySchema } from '../../../examples/kysely-orders/schema.js';
import { ADAPTERS, type AdapterName, bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { startWarehouse, type Warehouse } from '../../examples/support/warehouse.js';
import { probedOrdersModule, refusals } from '../../support/kysely-probes.js';
import { startWorker, type WorkerProcess } from '../../support/worker-process.js';

/**
 * examples/kysely-orders: Kysely (PostgresDialect) on the pool the library was given. The
 * outcomes of the TypeORM suites (atomic, transaction-seam, outer-timeout, phases), with
 * Kysely's own API in the handler: a race, a killed process, an outer timeout, a terminated
 * connection and a serialization failure, a swallowed failed statement, a lost lease, nested,
 * controlled and parallel work, isolation levels, phases with a real warehouse; and the
 * controls that show each can fail (a route that is not atomic, Kysely on another pool).
 */
const PROBLEM = /^application\/problem\+json/;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let database: TestDatabase;
let db: Client;
let warehouse: Warehouse;
let starting: Promise<WorkerProcess>[] = [];
let n = 0;
const tag = (label: string) => `${label}-${++n}-${Date.now()}`;

beforeAll(async () => {
  database = await createTestDatabase('kysely_orders');
  const pool = new Pool({ connectionString: database.url, max: 1 });
  await applySchema(pool);
  await pool.end();
  db = new Client({ connectionString: database.url });
  await db.connect();
  warehouse = await startWarehouse();
  // The processes of the last tests, one each (each kills its own), started now: they boot
  // while the in-process tests run.
  starting = Array.from({ length: 3 }, () =>
    startWorker(
      'examples/kysely-orders/main.js',
      {
        DATABASE_URL: database.url,
        WAREHOUSE_URL: warehouse.url,
        LEASE_MS: '1000',
        ORDERS_TEST_HOOKS: 'true',
        PORT: '0',
      },
      60_000,
    ),
  );
  // Awaited by their tests; marked handled here so that a failed start fails its test only.
  for (const worker of starting) worker.catch(() => undefined);
});
afterAll(async () => {
  for (const worker of await Promise.allSettled(starting)) {
    if (worker.status === 'fulfilled') await worker.value.kill();
  }
  await warehouse?.close();
  await db?.end();
  await database?.drop();
});

type Target = INestApplication | string;
const post = (target: Target, path: string, key: string, body: object = {}, hold?: string) => {
  const req = request(typeof target === 'string' ? target : target.getHttpServer())
    .post(path)
    .set('Idempotency-Key', key);
  return (hold ? req.set('X-Test-Hold', hold) : req).send(body);
};

const count = async (sql: string, params: unknown[]) =>
  Number((await db.query<{ n: string }>(sql, params)).rows[0].n);
/** Orders of a sku (or of every sku that starts with it, with `%`). */
const orders = (sku: string) => count('SELECT count(*) AS n FROM orders WHERE sku LIKE $1', [sku]);
const events = async (orderId: number) =>
  (
    await db.query<{ kind: string }>(
      'SELECT kind FROM order_events WHERE order_id = $1 ORDER BY kind',
      [orderId],
    )
  ).rows.map((row) => row.kind);
const eventsOfSku = (sku: string) =>
  count(
    'SELECT count(*) AS n FROM order_events e JOIN orders o ON o.id = e.order_id WHERE o.sku = $1',
    [sku],
  );

/** Retries until the answer is not a 409 (the lease of a request that is still running). */
async function retryUntilSettled(send: () => Promise<request.Response>) {
  let res = await send();
  for (let i = 0; i < 80 && res.status === 409; i++) {
    await sleep(100);
    res = await send();
  }
  return res;
}

/**
 * The backend of a handler that wrote and has not committed: seen in the server's own view.
 * With `lastStatement`, once the last statement it ran begins so (a LIKE pattern).
 */
async function uncommittedBackend(lastStatement = '%'): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await db.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity
        WHERE datname = $1 AND state = 'idle in transaction' AND backend_xid IS NOT NULL
          AND query LIKE $2`,
      [database.name, lastStatement],
    );
    if (rows.length === 1) return rows[0].pid;
    await sleep(10);
  }
  throw new Error('no handler holds an uncommitted transaction');
}

function expectProblem(res: request.Response, status: number, code: string) {
  expect({ status: res.status, code: (res.body as { code?: string }).code }).toEqual({
    status,
    code,
  });
  expect(res.headers['content-type']).toMatch(PROBLEM);
}

const settings = () => ({
  databaseUrl: database.url,
  warehouseUrl: warehouse.url,
  testHooks: true,
});

describe.each(ADAPTERS)('the Kysely orders example on %s', (adapter: AdapterName) => {
  let app: INestApplication;

  beforeAll(async () => {
    app = await bootstrapTestApp(probedOrdersModule(settings()), adapter);
  });
  afterAll(() => app?.close());

  describe('POST /orders', () => {
    it('8 concurrent requests with one key: one order, one 201, the rest 409 key_in_progress or its replay; then 422 on another body', async () => {
      const key = tag('race');
      const body = { sku: key, quantity: 2 };
      const answers = await Promise.all(
        Array.from({ length: 8 }, () => post(app, '/orders', key, body, 'placed=300')),
      );
      const owners = answers.filter(
        (res) => res.status === 201 && res.headers['idempotent-replayed'] === undefined,
      );
      expect(owners).toHaveLength(1);
      const [first] = owners;
      expect(JSON.parse(first.text)).toEqual({
        id: expect.any(Number),
        sku: key,
        quantity: 2,
        status: 'placed',
      });
      for (const res of answers.filter((other) => other !== first)) {
        if (res.status === 409) {
          expectProblem(res, 409, 'key_in_progress');
        } else {
          expect([res.status, res.headers['idempotent-replayed'], res.text]).toEqual([
            201,
            'true',
            first.text,
          ]);
        }
      }
      for (let i = 0; i < 3; i++) {
        const retry = await retryUntilSettled(() => post(app, '/orders', key, body));
        expect([retry.status, retry.headers['idempotent-replayed'], retry.text]).toEqual([
          201,
          'true',
          first.text,
        ]);
      }
      expect(await orders(key)).toBe(1);
      expect(await events(first.body.id)).toEqual(['placed']);

      const other = await post(app, '/orders', key, { sku: key, quantity: 3 });
      expectProblem(other, 422, 'key_mismatch');
      expect(await orders(key)).toBe(1);
    });

    it('400 on a bad body, nothing claimed: the key then serves the good one', async () => {
      const key = tag('invalid');
      const bad = await post(app, '/orders', key, { sku: '', quantity: 0 });
      expect(bad.status).toBe(400);
      expect(await count('SELECT count(*) AS n FROM idempotency_keys WHERE key = $1', [key])).toBe(
        0,
      );
      const good = await post(app, '/orders', key, { sku: key, quantity: 1 });
      expect(good.status).toBe(201);
      const read = await request(app.getHttpServer()).get(`/orders/${good.body.id}`);
      expect([read.status, read.body]).toEqual([
        200,
        { id: good.body.id, sku: key, quantity: 1, status: 'placed', trackingNumber: null },
      ]);
      expect((await request(app.getHttpServer()).get('/orders/999999999')).status).toBe(404);
    });

    it('the handler’s connection terminated (pg_terminate_backend) after its writes: 503 store_unavailable, nothing committed, the retry runs once', async () => {
      const key = tag('terminated');
      const body = { sku: key, quantity: 1 };
      const pending = post(app, '/orders', key, body, 'placed=800').then((res) => res);
      // Its nested transaction is over (its savepoint released, in a round trip that checks
      // and ends what its COMMIT would): the handler holds.
      const pid = await uncommittedBackend('%RELEASE SAVEPOINT idempotency_nested_%');
      await db.query('SELECT pg_terminate_backend($1)', [pid]);
      const first = await pending;
      expectProblem(first, 503, 'store_unavailable');
      expect(first.headers['retry-after']).toBe('1');
      expect(await orders(key)).toBe(0);
      const retry = await retryUntilSettled(() => post(app, '/orders', key, body));
      expect([retry.status, retry.headers['idempotent-replayed']]).toEqual([201, undefined]);
      expect(await orders(key)).toBe(1);
      expect(await eventsOfSku(key)).toBe(1);
    });

    it('the connection terminated between a write and a nested transaction: 503 store_unavailable, nothing committed, the retry runs once', async () => {
      const key = tag('terminated-nested');
      const body = { sku: key, holdMs: 800 };
      const pending = post(app, '/probes/write-wait-nested', key, body).then((res) => res);
      const pid = await uncommittedBackend();
      await db.query('SELECT pg_terminate_backend($1)', [pid]);
      const first = await pending;
      expectProblem(first, 503, 'store_unavailable');
      expect(await orders(key)).toBe(0);
      const retry = await post(app, '/probes/write-wait-nested', key, body);
      expect(retry.status).toBe(201);
      expect([await orders(key), await eventsOfSku(key)]).toEqual([1, 1]);
    });

    it('the connection terminated inside a nested transaction, before its COMMIT: 503 store_unavailable, nothing stored, the retry runs once', async () => {
      const key = tag('terminated-commit');
      const body = { sku: key };
      const first = await post(app, '/probes/terminated-before-nested-commit', key, body);
      expectProblem(first, 503, 'store_unavailable');
      expect(await orders(key)).toBe(0);
      const retry = await post(app, '/probes/terminated-before-nested-commit', key, body);
      expect([retry.status, retry.headers['idempotent-replayed']]).toEqual([201, undefined]);
      expect([await orders(key), await eventsOfSku(key)]).toEqual([1, 1]);
    });

    it('a unique violation the handler swallowed aborts the transaction: 500 transaction_aborted, nothing stored or committed', async () => {
      const key = tag('swallow');
      for (let attempt = 0; attempt < 2; attempt++) {
        const res = await post(app, '/probes/swallow', key, { sku: key });
        expectProblem(res, 500, 'transaction_aborted');
        expect(res.headers['idempotent-replayed']).toBeUndefined();
        expect(await orders(key)).toBe(0);
      }
    });
  });

  describe('Kysely’s transactions in the request', () => {
    it('nested db.transaction(): each commits with the request (all rolled back by its 503); one that throws rolls back alone; a failed statement in one does not abort the request', async () => {
      const key = tag('nested');
      const body = { sku: key, failFirst: true };
      const first = await post(app, '/probes/nested', key, body);
      expectProblem(first, 503, 'retry_later');
      expect([await orders(key), await eventsOfSku(key)]).toEqual([0, 0]);
      const retry = await post(app, '/probes/nested', key, body);
      expect(retry.status).toBe(201);
      expect(retry.body).toEqual({ id: expect.any(Number), duplicate: '23505' });
      expect(await orders(key)).toBe(1);
      expect(await events(retry.body.id)).toEqual(['noted', 'placed']);
    });

    it('a statement failed and caught inside a nested transaction: that transaction fails alone, as Kysely’s does without the library (its COMMIT answered as a rollback); the rest commits with the answer', async () => {
      const key = tag('caught-inside');
      const first = await post(app, '/probes/caught-inside-nested', key, { sku: key });
      expect(first.status).toBe(201);
      expect(first.body).toMatchObject({ nested: 'failed' });
      expect([await orders(key), await eventsOfSku(key)]).toEqual([1, 0]);
      const again = await post(app, '/probes/caught-inside-nested', key, { sku: key });
      expect([again.status, again.headers['idempotent-replayed'], again.text]).toEqual([
        201,
        'true',
        first.text,
      ]);
      expect([await orders(key), await eventsOfSku(key)]).toEqual([1, 0]);
    });

    it('controlled transactions: startTransaction(), savepoint(), rollbackToSavepoint(), commit() and rollback() are savepoints of the request’s transaction', async () => {
      const key = tag('controlled');
      const body = { sku: key, failFirst: true };
      const first = await post(app, '/probes/controlled', key, body);
      expectProblem(first, 503, 'retry_later');
      // Its commit() committed nothing of its own: the request rolled back, and it with it.
      expect(await orders(`${key}-%`)).toBe(0);
      const retry = await post(app, '/probes/controlled', key, body);
      expect([retry.status, retry.body]).toEqual([201, { committed: true, rolledBack: true }]);
      const { rows } = await db.query<{ sku: string }>(
        'SELECT sku FROM orders WHERE sku LIKE $1 ORDER BY sku',
        [`${key}-%`],
      );
      expect(rows.map((row) => row.sku)).toEqual([`${key}-after-savepoint`, `${key}-kept`]);
    });

    it('parallel queries (a pool client each): one session, one transaction, committed or rolled back together', async () => {
      const key = tag('parallel');
      const body = { sku: key, failFirst: true };
      const first = await post(app, '/probes/parallel', key, body);
      expectProblem(first, 503, 'retry_later');
      expect(await orders(`${key}-%`)).toBe(0);
      const retry = await post(app, '/probes/parallel', key, body);
      expect([retry.status, retry.body]).toEqual([201, { sessions: 1 }]);
      expect(await orders(`${key}-%`)).toBe(3);
    });

    it.each(['serializable', 'repeatable read'])(
      'transaction().setIsolationLevel(%s) as the first work: the request’s transaction runs at it',
      async (level) => {
        const key = tag('level');
        const res = await post(app, '/probes/isolation', key, { sku: key, level });
        expect([res.status, res.body]).toEqual([201, { inside: level, after: level }]);
        expect(await orders(key)).toBe(1);
      },
    );

    it('a stronger level asked for after a write is refused (IsolationLevelRefusedError): nothing committed, the refusal stored', async () => {
      const key = tag('raised');
      const first = await post(app, '/probes/isolation-raised', key, { sku: key });
      expect([first.status, first.body]).toEqual([
        500,
        { statusCode: 500, message: 'Internal server error' },
      ]);
      expect(refusals.get(key)).toBe('IsolationLevelRefusedError');
      expect(await orders(`${key}%`)).toBe(0);
      const replay = await post(app, '/probes/isolation-raised', key, { sku: key });
      expect([replay.status, replay.headers['idempotent-replayed'], replay.text]).toEqual([
        500,
        'true',
        first.text,
      ]);
    });

    it.each<[string, string, number[], number]>([
      [
        'serializable',
        'one 201, one 503 database_transient whose retry finds the order',
        [201, 503],
        1,
      ],
      ['read committed', 'both place it: the race is real (the control)', [201, 201], 2],
    ])('a write-skew race of two keys at %s: %s', async (level, _outcome, statuses, placed) => {
      const sku = tag('skew');
      const keys = [tag('skew-a'), tag('skew-b')];
      const body = { sku, level, holdMs: 300 };
      const answers = await Promise.all(
        keys.map((key) => post(app, '/probes/first-of-sku', key, body)),
      );
      expect(answers.map((res) => res.status).sort()).toEqual(statuses);
      expect(await orders(sku)).toBe(placed);
      const loser = answers.findIndex((res) => res.status === 503);
      if (loser >= 0) {
        expectProblem(answers[loser], 503, 'database_transient');
        expect(answers[loser].headers['retry-after']).toBe('1');
        const retry = await post(app, '/probes/first-of-sku', keys[loser], body);
        expect([retry.status, retry.body]).toEqual([201, { placed: false }]);
        expect(await orders(sku)).toBe(1);
      }
    });
  });

  describe('POST /orders/:id/ship in phases', () => {
    it('reserved, then the warehouse with the derived key, then 200; the retry replays the bytes', async () => {
      const placed = await post(app, '/orders', tag('order'), { sku: tag('ship'), quantity: 1 });
      const id = placed.body.id as number;
      const key = tag('ship');
      const first = await post(app, `/orders/${id}/ship`, key);
      expect(first.status).toBe(200);
      expect(JSON.parse(first.text)).toEqual({
        id,
        status: 'shipped',
        trackingNumber: expect.stringMatching(/^TRK-/),
      });
      const replay = await post(app, `/orders/${id}/ship`, key);
      expect([replay.status, replay.headers['idempotent-replayed'], replay.text]).toEqual([
        200,
        'true',
        first.text,
      ]);
      const calls = warehouse.calls.filter((call) => call.orderId === String(id));
      expect(calls).toEqual([
        { orderId: String(id), key: expect.stringMatching(/^[0-9a-f-]{36}:shipped$/) },
      ]);
      expect(await events(id)).toEqual(['placed', 'reserved', 'shipped']);
      const read = await request(app.getHttpServer()).get(`/orders/${id}`);
      expect(read.body).toEqual({
        id,
        sku: placed.body.sku,
        quantity: 1,
        status: 'shipped',
        trackingNumber: first.body.trackingNumber,
      });
    });
  });

  describe('controls: what the library’s transaction is for', () => {
    it.each<[string, string, number]>([
      ['the route as it is', '/probes/place', 1],
      ['the same route with atomic: false', '/probes/place-not-atomic', 2],
      ['Kysely on a second pool, not the library’s', '/probes/place-other-pool', 2],
    ])(
      '%s (%s): a 503 after the writes, then the retry: %i order(s)',
      async (_name, path, placed) => {
        const key = tag('control');
        const body = { sku: key, failFirst: true };
        const first = await post(app, path, key, body);
        expectProblem(first, 503, 'retry_later');
        // Rolled back with the request, or left behind by it.
        expect(await orders(key)).toBe(placed - 1);
        const retry = await post(app, path, key, body);
        expect(retry.status).toBe(201);
        expect(await orders(key)).toBe(placed);
        expect(await eventsOfSku(key)).toBe(placed);
      },
    );
  });

  describe('an outer timeout (a global timeout() interceptor) while the handler runs', () => {
    let timed: INestApplication;
    beforeAll(async () => {
      timed = await bootstrapTestApp(
        probedOrdersModule({ ...settings(), requestTimeoutMs: 300 }),
        adapter,
      );
    });
    afterAll(() => timed?.close());

    it('408, not stored; 409 while the handler runs, nothing committed; then its own 201, replayed; one order', async () => {
      const key = tag('timeout');
      const body = { sku: key, quantity: 1 };
      const first = await post(timed, '/orders', key, body, 'placed=900');
      expect([first.status, first.headers['idempotent-replayed']]).toEqual([408, undefined]);
      const during = await post(timed, '/orders', key, body);
      expectProblem(during, 409, 'key_in_progress');
      expect(await orders(key)).toBe(0);
      const settled = await retryUntilSettled(() => post(timed, '/orders', key, body));
      expect([settled.status, settled.headers['idempotent-replayed']]).toEqual([201, 'true']);
      expect(JSON.parse(settled.text)).toEqual({
        id: expect.any(Number),
        sku: key,
        quantity: 1,
        status: 'placed',
      });
      expect(await orders(key)).toBe(1);
      expect(await events(settled.body.id)).toEqual(['placed']);
    });
  });

  describe('a lease lost while the handler runs (no heartbeat, a short lease)', () => {
    let short: INestApplication;
    beforeAll(async () => {
      short = await bootstrapTestApp(
        probedOrdersModule({ ...settings(), leaseMs: 500, heartbeat: false }),
        adapter,
      );
    });
    afterAll(() => short?.close());

    it('the stale worker ends 409 lease_lost with nothing committed; the new owner’s answer is stored', async () => {
      const key = tag('lease');
      const body = { sku: key, quantity: 1 };
      const stale = post(short, '/orders', key, body, 'placed=1200').then((res) => res);
      await sleep(800); // the lease (500 ms) ran out; the stale handler still holds
      const owner = await post(short, '/orders', key, body);
      const staleAnswer = await stale;
      expectProblem(staleAnswer, 409, 'lease_lost');
      expect(staleAnswer.headers['retry-after']).toBe('1');
      expect(owner.status).toBe(201);
      expect(await orders(key)).toBe(1);
      expect(await eventsOfSku(key)).toBe(1);
      const replay = await post(short, '/orders', key, body);
      expect(replay.text).toBe(owner.text);
    });
  });
});

describe('the Kysely orders example as processes, killed with SIGKILL', () => {
  let app: INestApplication;
  const used: WorkerProcess[] = [];
  beforeAll(async () => {
    app = await bootstrapTestApp(probedOrdersModule(settings()), 'express');
  });
  // A test that failed before its kill leaves no process behind.
  afterEach(() => Promise.all(used.splice(0).map((worker) => worker.kill())));
  afterAll(() => app?.close());

  const startOrders = async () => {
    const worker = await starting.shift()!;
    used.push(worker);
    return worker;
  };

  it('killed after its writes: nothing committed; another instance takes the retry after the lease, once', async () => {
    const worker = await startOrders();
    const key = tag('killed');
    const body = { sku: key, quantity: 1 };
    const doomed = post(worker.url, '/orders', key, body, 'placed=10000').then(
      (res) => res,
      (error: unknown) => error,
    );
    await uncommittedBackend(); // written, not committed
    await worker.kill('SIGKILL');
    await doomed;
    expect(await orders(key)).toBe(0);
    const retry = await retryUntilSettled(() => post(app, '/orders', key, body));
    expect([retry.status, retry.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect(await orders(key)).toBe(1);
    expect(await events(retry.body.id)).toEqual(['placed']);
  });

  it('killed inside the reserved phase, after its writes: none of them committed; the retry runs the phase once', async () => {
    const placed = await post(app, '/orders', tag('order'), { sku: tag('ship'), quantity: 1 });
    const id = placed.body.id as number;
    const worker = await startOrders();
    const key = tag('reserving-killed');
    const doomed = post(worker.url, `/orders/${id}/ship`, key, {}, 'reserving=10000').then(
      (res) => res,
      (error: unknown) => error,
    );
    await uncommittedBackend(); // the phase wrote, and has not committed
    await worker.kill('SIGKILL');
    await doomed;
    expect(await events(id)).toEqual(['placed']);
    const retry = await retryUntilSettled(() => post(app, `/orders/${id}/ship`, key));
    expect([retry.status, retry.body.status]).toEqual([200, 'shipped']);
    // A phase that ran twice would have met order_events' unique key: once.
    expect(await events(id)).toEqual(['placed', 'reserved', 'shipped']);
  });

  it('killed between reserved and shipped, its warehouse call in flight: the retry resumes; one derived key, one tracking number', async () => {
    const placed = await post(app, '/orders', tag('order'), { sku: tag('ship'), quantity: 1 });
    const id = placed.body.id as number;
    const worker = await startOrders();
    const key = tag('ship-killed');
    const callsBefore = warehouse.calls.length;
    warehouse.hold();
    const doomed = post(worker.url, `/orders/${id}/ship`, key).then(
      (res) => res,
      (error: unknown) => error,
    );
    await warehouse.received(callsBefore + 1); // the warehouse shipped; its answer is held
    await worker.kill('SIGKILL');
    await doomed;
    warehouse.release();
    expect(await events(id)).toEqual(['placed', 'reserved']);

    const retry = await retryUntilSettled(() => post(app, `/orders/${id}/ship`, key));
    expect(retry.status).toBe(200);
    const calls = warehouse.calls.filter((call) => call.orderId === String(id));
    expect(calls).toHaveLength(2);
    expect(new Set(calls.map((call) => call.key)).size).toBe(1);
    const trackingNumber = warehouse.shipments.get(calls[0].key);
    expect(JSON.parse(retry.text)).toEqual({ id, status: 'shipped', trackingNumber });
    // 'reserved' ran once (a second run would break order_events' unique key).
    expect(await events(id)).toEqual(['placed', 'reserved', 'shipped']);
    const { rows } = await db.query('SELECT tracking_number FROM orders WHERE id = $1', [id]);
    expect(rows).toEqual([{ tracking_number: trackingNumber }]);
    const replay = await post(app, `/orders/${id}/ship`, key);
    expect([replay.headers['idempotent-replayed'], replay.text]).toEqual(['true', retry.text]);
  });
});
