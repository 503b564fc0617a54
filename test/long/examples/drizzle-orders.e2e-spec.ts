import { drizzle } from 'drizzle-orm/node-postgres';
import { Client } from 'pg';
import { orderEvents, orders } from '../../../examples/drizzle-orders/schema.js';
import { drizzleCause } from '../../../lib/connection/driver-errors/drizzle.js';
import { ADAPTERS, type AdapterName } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { startWorker, type WorkerProcess } from '../../support/worker-process.js';
import { startWarehouse, type Warehouse } from '../../examples/support/warehouse.js';

/**
 * The Drizzle orders example (examples/drizzle-orders) on real PostgreSQL, as real processes:
 * Drizzle on the library's pool reaches exactly once. Each cell counts its effects in the
 * database (orders and order_events of a sku of its own) and asserts the library's answers
 * exactly; the controls show the same writes run twice, or stay after a 503, when they do
 * not join the request.
 */
const WORKER = 'test/examples/support/drizzle-orders-worker.js';
/** The example's main.ts, where `typeorm` and `@nestjs/typeorm` cannot be resolved. */
const MAIN = 'test/examples/support/drizzle-orders-without-typeorm.js';
/** The outer timeout a cell asks for (an app-wide interceptor outside @Idempotent()). */
const REQUEST_TIMEOUT_MS = 500;
/** The doomed worker's lease: it has no heartbeat, so a request held longer loses it. */
const LEASE_MS = 800;
const PROBLEM = 'application/problem+json';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The library's answers, whole. */
const PROBLEMS = {
  key_in_progress: {
    type: 'urn:idempotency:key_in_progress',
    title: 'Request in progress',
    status: 409,
    detail: 'A request with this idempotency key is still being processed; retry later.',
    code: 'key_in_progress',
  },
  key_mismatch: {
    type: 'urn:idempotency:key_mismatch',
    title: 'Idempotency key reused',
    status: 422,
    detail:
      'This idempotency key was already used with a different request (method, path or body); ' +
      'use a new key for a new operation.',
    code: 'key_mismatch',
  },
  lease_lost: {
    type: 'urn:idempotency:lease_lost',
    title: 'Idempotency lease lost',
    status: 409,
    detail:
      'This request lost its claim on the idempotency key to another worker; ' +
      'retry to receive the stored result.',
    code: 'lease_lost',
  },
  database_transient: {
    type: 'urn:idempotency:database_transient',
    title: 'Transient database error',
    status: 503,
    detail:
      'The database rolled this request back for a passing reason (a deadlock, a serialization ' +
      'failure, a statement or lock timeout); nothing was stored. Retry with the same key.',
    code: 'database_transient',
  },
  store_unavailable: {
    type: 'urn:idempotency:store_unavailable',
    title: 'Idempotency store unavailable',
    status: 503,
    detail:
      'The idempotency store became unavailable before the response could be stored. ' +
      'Retry later with the same key: completed atomic phases are not run again.',
    code: 'store_unavailable',
  },
  retry_later: {
    type: 'urn:idempotency:retry_later',
    title: 'Retry later',
    status: 503,
    detail: 'the downstream system is down',
    code: 'retry_later',
  },
  transaction_aborted: {
    type: 'urn:idempotency:transaction_aborted',
    title: 'Transaction aborted',
    status: 500,
    detail:
      "A statement of this request's transaction failed and the handler went on; nothing was " +
      'committed or stored. Retrying runs the request again.',
    code: 'transaction_aborted',
  },
};

interface Answer {
  status: number;
  contentType: string | null;
  retryAfter: string | null;
  replayed: string | null;
  text: string;
  body: Record<string, unknown>;
}

async function send(
  base: string,
  path: string,
  key: string | undefined,
  body: object,
  pause?: string,
  timeoutMs?: number,
): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
      ...(pause ? { 'x-test-pause': pause } : {}),
      ...(timeoutMs ? { 'x-test-timeout-ms': String(timeoutMs) } : {}),
    },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: Record<string, unknown> = {};
  try {
    parsed = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // not JSON: the text is what is asserted
  }
  return {
    status: res.status,
    contentType: res.headers.get('content-type'),
    retryAfter: res.headers.get('retry-after'),
    replayed: res.headers.get('idempotent-replayed'),
    text,
    body: parsed,
  };
}

/** Sends again while the key is in progress (409), as a client does after Retry-After. */
async function untilSettled(again: () => Promise<Answer>, withinMs = 8000): Promise<Answer> {
  const deadline = Date.now() + withinMs;
  let answer = await again();
  while (answer.status === 409 && answer.body.code === 'key_in_progress') {
    if (Date.now() > deadline) throw new Error(`still in progress after ${withinMs} ms`);
    await sleep(100);
    answer = await again();
  }
  return answer;
}

/** A problem answer of the library's: its media type, Retry-After, and body exactly. */
function expectProblem(answer: Answer, problem: object, retryAfter: string | null = null): void {
  expect({
    status: answer.status,
    contentType: answer.contentType?.split(';')[0],
    retryAfter: answer.retryAfter,
    replayed: answer.replayed,
    body: answer.body,
  }).toEqual({
    status: (problem as { status: number }).status,
    contentType: PROBLEM,
    retryAfter,
    replayed: null,
    body: problem,
  });
}

describe('the Drizzle orders example', () => {
  let database: TestDatabase;
  let db: Client;
  let warehouse: Warehouse;
  const apps = {} as Record<AdapterName, WorkerProcess>;
  /** With @nestjs-cls/transactional, nestjs-cls's context mounted each way (its middleware: on apps.express). */
  const clsApps = {} as Record<'interceptor' | 'middleware', WorkerProcess>;
  /** A short lease and no heartbeat, for the lost lease; then killed with requests in it. */
  let doomed: WorkerProcess;
  /** The example's own main.ts. */
  let main: WorkerProcess;
  let n = 0;
  const label = (name: string) => `${name}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    database = await createTestDatabase('drizzle_orders');
    db = new Client({ connectionString: database.url });
    await db.connect();
    warehouse = await startWarehouse();
    const env = { DATABASE_URL: database.url, WAREHOUSE_URL: warehouse.url };
    const worker = (extra: Record<string, string>) =>
      startWorker(WORKER, { ...env, ...extra }, 60_000);
    // All at once (the first applies the schema, the others wait on its advisory lock).
    [apps.express, apps.fastify, clsApps.interceptor, doomed, main] = await Promise.all([
      // Express with nestjs-cls mounted as its middleware: every cell on it runs with it.
      worker({ ADAPTER: 'express', CLS: 'middleware' }),
      worker({ ADAPTER: 'fastify' }),
      worker({ CLS: 'interceptor' }),
      worker({ LEASE_MS: String(LEASE_MS), HEARTBEAT: 'false' }),
      startWorker(MAIN, { ...env, PORT: '0' }, 60_000),
    ]);
    clsApps.middleware = apps.express;
  });
  afterAll(async () => {
    await Promise.all(
      [...Object.values(apps), clsApps.interceptor, doomed, main].map((process) => process?.kill()),
    );
    await warehouse?.close();
    await db?.end();
    await database?.drop();
  });

  const ordersOf = async (sku: string) =>
    Number(
      (await db.query<{ n: string }>('SELECT count(*) AS n FROM orders WHERE sku = $1', [sku]))
        .rows[0].n,
    );
  const eventsOf = async (sku: string) =>
    (
      await db.query<{ kind: string }>(
        `SELECT e.kind FROM order_events e JOIN orders o ON o.id = e.order_id
          WHERE o.sku = $1 ORDER BY e.id`,
        [sku],
      )
    ).rows.map(({ kind }) => kind);
  const keyRow = async (key: string) =>
    (
      await db.query<{ state: string; released: boolean; recovery_point: string }>(
        `SELECT state, locked_until IS NULL AS released, recovery_point
           FROM idempotency_keys WHERE key = $1`,
        [key],
      )
    ).rows[0];
  /**
   * The app's connections waiting in an open transaction for 200 ms or more: a handler held at
   * a pause point (the library's own transactions, the claim's, never wait that long).
   */
  const inTransaction = async () =>
    (
      await db.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity
          WHERE datname = $1 AND pid <> pg_backend_pid() AND state = 'idle in transaction'
            AND now() - state_change > interval '200 milliseconds'`,
        [database.name],
      )
    ).rows.map(({ pid }) => pid);
  const until = async (what: string, check: () => Promise<boolean>, withinMs = 15_000) => {
    const deadline = Date.now() + withinMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`not within ${withinMs} ms: ${what}`);
      await sleep(20);
    }
  };

  describe('its main.ts, as a user starts it, with no TypeORM to load', () => {
    it('places an order (201, replayed byte for byte), shows it, and refuses bad input with 400 before claiming', async () => {
      const sku = label('main');
      const bad = await send(main.url, '/orders', sku, { sku, quantity: 0 });
      expect(bad.status).toBe(400);
      expect(bad.body).toEqual({
        message: ['quantity must not be less than 1'],
        error: 'Bad Request',
        statusCode: 400,
      });
      expect(await keyRow(sku)).toBeUndefined();
      const first = await send(main.url, '/orders', sku, { sku, quantity: 2 });
      expect(first.status).toBe(201);
      expect(first.body).toEqual({ id: expect.any(Number), sku, quantity: 2, status: 'placed' });
      const again = await send(main.url, '/orders', sku, { sku, quantity: 2 });
      expect({ status: again.status, replayed: again.replayed, text: again.text }).toEqual({
        status: 201,
        replayed: 'true',
        text: first.text,
      });
      const shown = await fetch(`${main.url}/orders/${String(first.body.id)}`);
      expect(await shown.json()).toEqual({ ...first.body, trackingNumber: null });
      expect(await ordersOf(sku)).toBe(1);
      expect(await eventsOf(sku)).toEqual(['placed']);
    });

    it('ships in phases: 200 with the tracking number the warehouse gave for the derived key', async () => {
      const sku = label('ship');
      const placed = await send(main.url, '/orders', sku, { sku, quantity: 1 });
      const id = placed.body.id as number;
      const key = label('ship-key');
      const first = await send(main.url, `/orders/${id}/ship`, key, {});
      const claim = await db.query<{ claim_id: string }>(
        'SELECT claim_id FROM idempotency_keys WHERE key = $1',
        [key],
      );
      const derived = `${claim.rows[0].claim_id}:shipped`;
      expect(first.status).toBe(200);
      expect(first.body).toEqual({
        id,
        status: 'shipped',
        trackingNumber: warehouse.shipments.get(derived),
      });
      const again = await send(main.url, `/orders/${id}/ship`, key, {});
      expect({ status: again.status, replayed: again.replayed, text: again.text }).toEqual({
        status: 200,
        replayed: 'true',
        text: first.text,
      });
      expect(warehouse.calls.filter((call) => call.orderId === String(id))).toEqual([
        { key: derived, orderId: String(id) },
      ]);
      expect(await eventsOf(sku)).toEqual(['placed', 'shipped']);
      expect(await keyRow(key)).toMatchObject({ state: 'done', recovery_point: 'finished' });
    });
  });

  describe.each(ADAPTERS)('on %s', (adapter) => {
    const url = () => apps[adapter].url;

    it('1. eight concurrent requests with one key: one order; 201 or 409 key_in_progress; every retry replays the 201; 422 on another body', async () => {
      const sku = label(`race-${adapter}`);
      const body = { sku, quantity: 3 };
      const answers = await Promise.all(
        Array.from({ length: 8 }, () => send(url(), '/orders', sku, body, 'after-writes=300')),
      );
      const created = answers.filter((answer) => answer.status === 201);
      expect(created).toHaveLength(1);
      for (const answer of answers.filter((one) => one.status !== 201)) {
        expectProblem(answer, PROBLEMS.key_in_progress, '1');
      }
      expect(await ordersOf(sku)).toBe(1);
      const retries = await Promise.all(
        Array.from({ length: 8 }, () => untilSettled(() => send(url(), '/orders', sku, body))),
      );
      for (const retry of retries) {
        expect({ status: retry.status, replayed: retry.replayed, text: retry.text }).toEqual({
          status: 201,
          replayed: 'true',
          text: created[0].text,
        });
      }
      expectProblem(await send(url(), '/orders', sku, { sku, quantity: 4 }), PROBLEMS.key_mismatch);
      expect(await ordersOf(sku)).toBe(1);
      expect(await eventsOf(sku)).toEqual(['placed']);
    });

    it('3. a handler slower than the outer timeout: 408, nothing committed while it runs (409), then its own 201 replayed; it ran once', async () => {
      const sku = label(`timeout-${adapter}`);
      const body = { sku, quantity: 1 };
      const first = await send(
        url(),
        '/orders',
        sku,
        body,
        `after-writes=${REQUEST_TIMEOUT_MS + 400}`,
        REQUEST_TIMEOUT_MS,
      );
      expect({ status: first.status, body: first.body }).toEqual({
        status: 408,
        body: { message: 'Request Timeout', statusCode: 408 },
      });
      expectProblem(await send(url(), '/orders', sku, body), PROBLEMS.key_in_progress, '1');
      expect(await ordersOf(sku)).toBe(0);
      expect(await keyRow(sku)).toMatchObject({ state: 'started', released: false });
      const retry = await untilSettled(() => send(url(), '/orders', sku, body));
      expect(retry.status).toBe(201);
      expect(retry.replayed).toBe('true');
      expect(retry.body).toEqual({ id: expect.any(Number), sku, quantity: 1, status: 'placed' });
      expect(await ordersOf(sku)).toBe(1);
      expect(await eventsOf(sku)).toEqual(['placed']);
    });

    it('4. a serialization failure between two SERIALIZABLE orders of one sku, met by the later one’s insert: 503 database_transient, rolled back; its retry runs once', async () => {
      const sku = label(`skew-${adapter}`);
      const [early, late] = [
        { key: label('skew-early'), body: { sku, quantity: 1 }, pause: 'after-read=100' },
        // Reads with the early one, inserts after it committed: PostgreSQL fails the insert
        // (40001), a statement of Drizzle's, so the error reaches the library inside
        // Drizzle's DrizzleQueryError.
        { key: label('skew-late'), body: { sku, quantity: 2 }, pause: 'after-read=700' },
      ];
      const [first, second] = await Promise.all(
        [early, late].map(({ key, body, pause }) => send(url(), '/orders', key, body, pause)),
      );
      expect(first.status).toBe(201);
      expectProblem(second, PROBLEMS.database_transient, '1');
      expect(await ordersOf(sku)).toBe(1);
      expect(await keyRow(late.key)).toMatchObject({ state: 'started', released: true });
      const retry = await send(url(), '/orders', late.key, late.body);
      expect(retry.status).toBe(201);
      expect(retry.replayed).toBeNull();
      expect(await ordersOf(sku)).toBe(2);
      expect(await eventsOf(sku)).toEqual(['placed', 'placed']);
    });

    it('4. the handler’s connection terminated after its first write: 503 store_unavailable, nothing committed; the retry runs once', async () => {
      const sku = label(`terminated-${adapter}`);
      const body = { sku, quantity: 1 };
      const pending = send(url(), '/orders', sku, body, 'after-order=800');
      await until(
        'the handler holds its transaction',
        async () => (await inTransaction()).length > 0,
      );
      const [pid] = await inTransaction();
      await db.query('SELECT pg_terminate_backend($1)', [pid]);
      expectProblem(await pending, PROBLEMS.store_unavailable, '1');
      expect(await ordersOf(sku)).toBe(0);
      expect(await keyRow(sku)).toMatchObject({ state: 'started', released: true });
      const retry = await send(url(), '/orders', sku, body);
      expect(retry.status).toBe(201);
      expect(await ordersOf(sku)).toBe(1);
      expect(await eventsOf(sku)).toEqual(['placed']);
    });

    it('5. a unique violation the handler swallows: 500 transaction_aborted each time, nothing stored, no rows', async () => {
      const sku = label(`swallow-${adapter}`);
      for (let attempt = 0; attempt < 2; attempt++) {
        expectProblem(
          await send(url(), '/cells/swallow', sku, { sku }),
          PROBLEMS.transaction_aborted,
        );
        expect(await ordersOf(sku)).toBe(0);
        expect(await keyRow(sku)).toMatchObject({ state: 'started', released: true });
      }
    });

    it('a COMMIT sent through Drizzle (db.execute) is refused; the handler that catches it and answers gets 500 transaction_aborted, nothing committed', async () => {
      const sku = label(`raw-commit-${adapter}`);
      for (let attempt = 0; attempt < 2; attempt++) {
        expectProblem(
          await send(url(), '/cells/raw-commit', sku, { sku }),
          PROBLEMS.transaction_aborted,
        );
        expect(await ordersOf(sku)).toBe(0);
      }
    });

    it('7. nested transactions: one that throws and is caught rolls back alone, the rest commits with the request, and nothing of it after a 503', async () => {
      const sku = label(`nested-${adapter}`);
      const body = { sku, failFirst: true };
      const failed = await send(url(), '/cells/nested', sku, body);
      expectProblem(failed, PROBLEMS.retry_later, '1');
      expect(await ordersOf(sku)).toBe(0);
      const first = await send(url(), '/cells/nested', sku, body);
      expect(first.status).toBe(201);
      // The caught tx.transaction() lost its 'gift-wrapped'; the caught db.transaction() met
      // the unique violation (23505, inside Drizzle's error) and rolled back to its savepoint.
      expect(first.body).toEqual({
        id: expect.any(Number),
        duplicate: '23505',
        events: ['placed', 'noted'],
      });
      expect(await ordersOf(sku)).toBe(1);
      expect(await eventsOf(sku)).toEqual(['placed', 'noted']);
      const again = await send(url(), '/cells/nested', sku, body);
      expect({ replayed: again.replayed, text: again.text }).toEqual({
        replayed: 'true',
        text: first.text,
      });
    });

    it('7. db.transaction(fn, { isolationLevel: serializable }) as the first work: the request’s transaction runs at it', async () => {
      const sku = label(`serializable-${adapter}`);
      const first = await send(url(), '/cells/isolation/first', sku, { sku });
      expect({ status: first.status, body: first.body }).toEqual({
        status: 201,
        body: { level: 'serializable' },
      });
      expect(await ordersOf(sku)).toBe(1);
    });

    it('7. a stronger level asked for after a write: refused inside Drizzle’s error, nothing committed, the refusal stored', async () => {
      const sku = label(`stronger-${adapter}`);
      const first = await send(url(), '/cells/isolation/after-write', sku, { sku });
      expect({ status: first.status, body: first.body }).toEqual({
        status: 500,
        body: {
          wrapper: 'DrizzleQueryError',
          error: 'IsolationLevelRefusedError',
          message:
            "isolation level refused: the request's transaction already began at READ COMMITTED, " +
            "and PostgreSQL cannot raise a transaction's isolation level once it began. Set it on " +
            "the route, @Idempotent({ isolationLevel: 'SERIALIZABLE' }), or make this transaction " +
            "the handler's first database work",
        },
      });
      expect(await ordersOf(sku)).toBe(0);
      const again = await send(url(), '/cells/isolation/after-write', sku, { sku });
      expect({ replayed: again.replayed, text: again.text }).toEqual({
        replayed: 'true',
        text: first.text,
      });
    });
  });

  describe('with @nestjs-cls/transactional and its Drizzle adapter', () => {
    it('@Transactional() and Propagation.RequiresNew join the request: all rolled back on a 503, once on the retry', async () => {
      const sku = label('cls');
      const body = { sku, failFirst: true };
      const url = clsApps.interceptor.url;
      expectProblem(await send(url, '/cells/cls', sku, body), PROBLEMS.retry_later, '1');
      // RequiresNew's own transaction too: a savepoint of the request's.
      expect(await ordersOf(sku)).toBe(0);
      const retry = await send(url, '/cells/cls', sku, body);
      expect(retry.status).toBe(201);
      expect(await ordersOf(sku)).toBe(1);
      expect(await eventsOf(sku)).toEqual(['audited']);
    });

    it.each(['middleware', 'interceptor'] as const)(
      '3. an outer timeout, nestjs-cls mounted as its %s: the 408 is not stored; the handler’s own 201 is, and its order once',
      async (mount) => {
        // ClsInterceptor subscribes to the route's interceptors without a teardown: the outer
        // timeout's unsubscribe never reaches @Idempotent(), which must still not take the
        // 408 it then sees written for the handler's answer. Its middleware is not in the way.
        const sku = label(`cls-timeout-${mount}`);
        const body = { sku, quantity: 1 };
        const url = clsApps[mount].url;
        const pause = `after-writes=${REQUEST_TIMEOUT_MS + 400}`;
        const first = await send(url, '/orders', sku, body, pause, REQUEST_TIMEOUT_MS);
        expect(first.status).toBe(408);
        const retry = await untilSettled(() => send(url, '/orders', sku, body));
        expect({ status: retry.status, replayed: retry.replayed }).toEqual({
          status: 201,
          replayed: 'true',
        });
        expect(await ordersOf(sku)).toBe(1);
      },
    );
  });

  describe('crashes and leases (express)', () => {
    it('a SERIALIZABLE order held past a heartbeat (leaseMs / 3): the lease renewals do not fail its commit; 201, one order', async () => {
      const sku = label('serializable-heartbeat');
      const body = { sku, quantity: 1 };
      // The default lease is 5 s, renewed every 1.67 s by a statement of its own that
      // commits; the request's SERIALIZABLE transaction then stores its answer in that row.
      const first = await send(apps.express.url, '/orders', sku, body, 'after-writes=2500');
      expect(first.status).toBe(201);
      expect(await ordersOf(sku)).toBe(1);
    });

    it('6. a lost lease (no heartbeat): the slow first worker ends 409 lease_lost with nothing committed; one order, the owner’s answer replayed', async () => {
      const sku = label('lease');
      // A READ COMMITTED route: under SERIALIZABLE the owner's commit would doom the stale
      // transaction (40001) before its fence could tell it lost the lease.
      const stale = send(
        doomed.url,
        '/cells/nested',
        sku,
        { sku },
        `after-writes=${LEASE_MS + 700}`,
      );
      await sleep(LEASE_MS + 200); // its lease ran out; it still waits
      const owner = await send(doomed.url, '/cells/nested', sku, { sku });
      expect(owner.status).toBe(201);
      expectProblem(await stale, PROBLEMS.lease_lost, '1');
      expect(await ordersOf(sku)).toBe(1);
      expect(await eventsOf(sku)).toEqual(['placed', 'noted']);
      const replay = await send(apps.express.url, '/cells/nested', sku, { sku });
      expect(replay.text).toBe(owner.text);
    });

    /**
     * One process killed with four requests held in it: an order past its writes, a shipment
     * between its phases, another after the warehouse's answer and before its record, and the
     * control's order (atomic: false) past its writes.
     * Each cell then retries its own on another instance.
     */
    describe('a process killed while requests are held in it', () => {
      const crash = { sku: label('crash'), quantity: 1 };
      const phased = { sku: label('phase-crash'), key: label('ship'), id: 0 };
      const called = { sku: label('call-crash'), key: label('ship-called'), id: 0 };
      const control = { sku: label('control-crash'), quantity: 1 };
      beforeAll(async () => {
        const placed = await send(apps.express.url, '/orders', phased.sku, {
          sku: phased.sku,
          quantity: 1,
        });
        phased.id = placed.body.id as number;
        const other = await send(apps.express.url, '/orders', called.sku, {
          sku: called.sku,
          quantity: 1,
        });
        called.id = other.body.id as number;
        const held = 'after-writes=30000,after-reserved=30000';
        const lost = [
          send(doomed.url, '/orders', crash.sku, crash, held),
          send(doomed.url, `/orders/${phased.id}/ship`, phased.key, {}, held),
          send(doomed.url, '/cells/not-atomic', control.sku, control, held),
          send(doomed.url, `/orders/${called.id}/ship`, called.key, {}, 'after-shipment=30000'),
        ].map((answer) => answer.catch((error: unknown) => error));
        await until('the order is past its writes', async () => (await inTransaction()).length > 0);
        await until('the phase reserved committed', async () => {
          return (await keyRow(phased.key))?.recovery_point === 'reserved';
        });
        await until(
          'the control’s order committed',
          async () => (await ordersOf(control.sku)) === 1,
        );
        await until('the warehouse shipped the other order', async () =>
          warehouse.calls.some((call) => call.orderId === String(called.id)),
        );
        await doomed.kill('SIGKILL');
        await Promise.all(lost);
      });

      it('2. killed past its writes: nothing committed; a second instance takes the retry after the lease: 201, one order, one event', async () => {
        expect(await ordersOf(crash.sku)).toBe(0);
        const retry = await untilSettled(() => send(apps.express.url, '/orders', crash.sku, crash));
        expect(retry.status).toBe(201);
        expect(retry.replayed).toBeNull();
        expect(await ordersOf(crash.sku)).toBe(1);
        expect(await eventsOf(crash.sku)).toEqual(['placed']);
        expect(await keyRow(crash.sku)).toMatchObject({ state: 'done', released: true });
      });

      it('8. killed between the phases reserved and shipped: the retry resumes; the warehouse saw one derived key, one tracking number', async () => {
        const { id, key, sku } = phased;
        const { rows } = await db.query('SELECT status FROM orders WHERE id = $1', [id]);
        expect(rows).toEqual([{ status: 'reserved' }]);
        const retry = await untilSettled(() =>
          send(apps.express.url, `/orders/${id}/ship`, key, {}),
        );
        const calls = warehouse.calls.filter((call) => call.orderId === String(id));
        expect(calls).toHaveLength(1);
        expect(retry.status).toBe(200);
        expect(retry.body).toEqual({
          id,
          status: 'shipped',
          trackingNumber: warehouse.shipments.get(calls[0].key),
        });
        const claim = await db.query<{ claim_id: string }>(
          'SELECT claim_id FROM idempotency_keys WHERE key = $1',
          [key],
        );
        expect(calls[0].key).toBe(`${claim.rows[0].claim_id}:shipped`);
        expect(await eventsOf(sku)).toEqual(['placed', 'shipped']);
        const shown = await fetch(`${apps.express.url}/orders/${id}`);
        expect(await shown.json()).toEqual({
          id,
          sku,
          quantity: 1,
          status: 'shipped',
          trackingNumber: retry.body.trackingNumber,
        });
      });

      it('8. killed after the warehouse shipped, before its tracking number was recorded: the retry calls again with the same derived key and gets the same tracking number', async () => {
        const { id, key, sku } = called;
        const { rows } = await db.query(
          'SELECT status, tracking_number FROM orders WHERE id = $1',
          [id],
        );
        expect(rows).toEqual([{ status: 'reserved', tracking_number: null }]);
        const retry = await untilSettled(() =>
          send(apps.express.url, `/orders/${id}/ship`, key, {}),
        );
        const calls = warehouse.calls.filter((call) => call.orderId === String(id));
        // Two calls, one key: the warehouse shipped once, and both got its tracking number.
        expect(calls.map((call) => call.key)).toEqual([calls[0].key, calls[0].key]);
        expect(retry.status).toBe(200);
        expect(retry.body).toEqual({
          id,
          status: 'shipped',
          trackingNumber: warehouse.shipments.get(calls[0].key),
        });
        expect(await eventsOf(sku)).toEqual(['placed', 'shipped']);
      });

      it('9. the control: the same service on a route with atomic: false, killed at the same point, runs its writes twice', async () => {
        const retry = await untilSettled(() =>
          send(apps.express.url, '/cells/not-atomic', control.sku, control),
        );
        expect(retry.status).toBe(201);
        expect(await ordersOf(control.sku)).toBe(2);
        expect(await eventsOf(control.sku)).toEqual(['placed', 'placed']);
      });
    });

    it('9. the control: Drizzle on a pool that is not the library’s leaves its order after the 503, and the retry writes another', async () => {
      const sku = label('control-apart');
      const body = { sku, failFirst: true };
      expectProblem(
        await send(apps.express.url, '/cells/apart', sku, body),
        PROBLEMS.retry_later,
        '1',
      );
      expect(await ordersOf(sku)).toBe(1);
      const retry = await send(apps.express.url, '/cells/apart', sku, body);
      expect(retry.status).toBe(201);
      expect(await ordersOf(sku)).toBe(2);
    });
  });

  it('drizzleCause() finds node-postgres’ error inside the errors Drizzle really raises', async () => {
    const client = new Client({ connectionString: database.url });
    await client.connect();
    const direct = drizzle({ client });
    const sku = label('cause');
    const [order] = await direct
      .insert(orders)
      .values({ sku, quantity: 1, status: 'placed' })
      .returning();
    await direct.insert(orderEvents).values({ orderId: order.id, kind: 'placed' });
    const duplicate = await direct
      .insert(orderEvents)
      .values({ orderId: order.id, kind: 'placed' })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect((duplicate as Error).constructor.name).toBe('DrizzleQueryError');
    expect(drizzleCause(duplicate)).toMatchObject({ code: '23505', severity: 'ERROR' });
    client.on('error', () => undefined); // the termination, announced while idle
    await db.query('SELECT pg_terminate_backend($1)', [
      (client as unknown as { processID: number }).processID,
    ]);
    await sleep(100);
    const gone = await direct
      .select()
      .from(orders)
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(drizzleCause(gone)).toBeInstanceOf(Error);
    expect((drizzleCause(gone) as Error).message).toMatch(
      /^(Client has encountered a connection error and is not queryable|Connection terminated)/,
    );
    expect(drizzleCause(duplicate)).not.toBe(duplicate);
    await client.end().catch(() => undefined);
  });
});
