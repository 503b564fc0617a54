import { Client } from 'pg';
import request from 'supertest';
import { startFakePsp, type FakePsp } from '../sample-app/psp/fake-psp.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import {
  expectFresh,
  expectInProgress,
  expectProblem,
  expectReplayOf,
  getPath,
  JSON_TYPE,
  KEY_MISMATCH,
  MIB,
  padTo,
  PROBLEM,
  type Res,
  retryWhileInProgress,
  sleep,
  UNAUTHORIZED,
  UUID,
} from './support/sample-app-http.js';
import {
  type SampleAppAdapter,
  type SampleAppSettings,
  startSampleApp,
  viaPort,
  type WorkerProcess,
} from './support/sample-app-process.js';
import { TcpProxy } from './support/tcp-proxy.js';

/**
 * `POST /transfers`, the sample app's plain handler (one repository write, then
 * `TRANSFER_DELAY_MS`, no phases), driven as a black box over HTTP as its contract fixes it:
 * exactly one transfer row per key, and one stored answer for every retry, whatever happens
 * during the wait (the process killed, the global timeout firing, the database lost). The
 * effects are counted in the `transfers` table itself, not through the app.
 */

const ADAPTERS: SampleAppAdapter[] = ['express', 'fastify'];
/** The lease of the instances whose requests are cut short, so that a takeover comes quickly. */
const SHORT_LEASE_MS = 1500;
/** `TRANSFER_DELAY_MS` of the instance on which a second request meets the first in progress. */
const SLOW_DELAY_MS = 1000;
/** `TRANSFER_DELAY_MS` of the instance that is killed during its wait. */
const KILLED_DELAY_MS = 1500;
/** When the victim is killed: its row is written, its wait not over. */
const KILL_AFTER_MS = 500;
/** `REQUEST_TIMEOUT_MS` and `TRANSFER_DELAY_MS` of the instance whose global timeout fires. */
const TIMEOUT_MS = 300;
const TIMED_DELAY_MS = 1000;
/** `TRANSFER_DELAY_MS` of the instance whose database is cut during the wait, and when. */
const CUT_DELAY_MS = 1000;
const CUT_AFTER_MS = 400;

interface TransferBody {
  amount: number;
  from: string;
  to: string;
}

/** A transfer as the API shows it, and as a row of the `transfers` table reads. */
interface TransferView extends TransferBody {
  id: string;
}

/** `POST /transfers`; a string payload is sent as is, as `application/json`. */
function postTransfer(
  url: string,
  tenant: string | undefined,
  key: string | undefined,
  payload: TransferBody | Record<string, unknown> | string,
): Promise<Res> {
  let req = request(url).post('/transfers');
  if (tenant !== undefined) req = req.set('X-Tenant-Id', tenant);
  if (key !== undefined) req = req.set('Idempotency-Key', key);
  if (typeof payload === 'string') req = req.set('Content-Type', 'application/json');
  // `then` starts the request now, so that callers can run several at once.
  return req.send(payload).then((res) => res);
}

/** `GET /transfers?from=`: the tenant's transfers from that customer. */
async function listTransfers(url: string, tenant: string, from: string): Promise<TransferView[]> {
  const res = await getPath(url, `/transfers?from=${encodeURIComponent(from)}`, tenant);
  expect(res.status).toBe(200);
  expect(res.headers['content-type']).toMatch(JSON_TYPE);
  return res.body as TransferView[];
}

describe.each(ADAPTERS)('POST /transfers on %s', (adapter) => {
  let database: TestDatabase;
  /** Reads the `transfers` table directly: the effects, not what the app says of them. */
  let db: Client;
  /** Only there because the app needs a PSP; no transfer calls it. */
  let psp: FakePsp;
  /** Between the `flakyDb` instance and PostgreSQL: cut to lose the database during the wait. */
  let dbProxy: TcpProxy;
  /** Answers at once (`TRANSFER_DELAY_MS` 0), the default lease. */
  let main: WorkerProcess;
  /** Waits `SLOW_DELAY_MS` after its write, the default lease. */
  let slow: WorkerProcess;
  /** A global timeout of `TIMEOUT_MS` in front of a `TIMED_DELAY_MS` wait; a short lease. */
  let timed: WorkerProcess;
  /** Reaches PostgreSQL through `dbProxy`, waits `CUT_DELAY_MS`; a short lease. */
  let flakyDb: WorkerProcess;
  const spawned: WorkerProcess[] = [];

  let seq = 0;
  const run = Date.now().toString(36);
  const newKey = () => `transfer-${adapter}-${run}-${++seq}`;
  const newCustomer = () => `cus_${adapter}_${run}_${++seq}`;
  /** A tenant of the test's own, so that its keys and transfers are its own too. */
  const newTenant = () => String(2000 + ++seq);
  const newTransfer = (amount = 2500): TransferBody => ({
    amount,
    from: newCustomer(),
    to: newCustomer(),
  });

  const spawnApp = async (settings: Partial<SampleAppSettings>) => {
    const app = await startSampleApp({
      adapter,
      databaseUrl: database.url,
      pspUrl: psp.url,
      ...settings,
    });
    spawned.push(app);
    return app;
  };

  /** The rows the tenant's transfers from `from` left in the table, oldest first. */
  const rowsOf = async (tenant: string, from: string): Promise<TransferView[]> => {
    const { rows } = await db.query<TransferView>(
      `SELECT id, amount::int AS amount, from_customer AS "from", to_customer AS "to"
         FROM transfers WHERE tenant_id = $1 AND from_customer = $2
        ORDER BY created_at, id`,
      [tenant, from],
    );
    return rows;
  };

  beforeAll(async () => {
    database = await createTestDatabase(`sample_app_transfers_${adapter}`);
    psp = await startFakePsp();
    const target = new URL(database.url);
    dbProxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await dbProxy.start();

    // All four start at once on a fresh database: they migrate once, under the app's lock.
    const start = (settings: Partial<SampleAppSettings>) =>
      startSampleApp({ adapter, databaseUrl: database.url, pspUrl: psp.url, ...settings });
    const all = await Promise.allSettled([
      start({}),
      start({ transferDelayMs: SLOW_DELAY_MS }),
      start({
        requestTimeoutMs: TIMEOUT_MS,
        transferDelayMs: TIMED_DELAY_MS,
        leaseMs: SHORT_LEASE_MS,
      }),
      start({
        transferDelayMs: CUT_DELAY_MS,
        leaseMs: SHORT_LEASE_MS,
        databaseUrl: viaPort(database.url, dbProxy.port),
      }),
    ]);
    const started = all.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    const failed = all.find((o): o is PromiseRejectedResult => o.status === 'rejected');
    if (failed) {
      await Promise.all(started.map((app) => app.kill('SIGKILL')));
      throw failed.reason;
    }
    [main, slow, timed, flakyDb] = started;
    db = new Client({ connectionString: database.url });
    await db.connect();
  });

  afterEach(async () => {
    await Promise.all(spawned.splice(0).map((app) => app.kill('SIGKILL')));
  });

  afterAll(async () => {
    await Promise.all(
      [main, slow, timed, flakyDb].filter(Boolean).map((app) => app.kill('SIGKILL')),
    );
    await db?.end();
    await dbProxy?.stop();
    await psp?.close();
    await database?.drop();
  });

  describe('the ordinary path', () => {
    it('201 with exactly {id, amount, from, to}; a retry replays it byte for byte on any instance; GET lists it once, with that id', async () => {
      const [tenant, key, body] = [newTenant(), newKey(), newTransfer(2500)];
      const first = await postTransfer(main.url, tenant, key, body);
      expectFresh(first);
      expect(first.headers['content-type']).toMatch(JSON_TYPE);
      expect(first.body).toEqual({ id: expect.stringMatching(UUID), ...body });
      expect(Object.keys(first.body).sort()).toEqual(['amount', 'from', 'id', 'to']);
      expect(await rowsOf(tenant, body.from)).toEqual([first.body]);

      for (const url of [main.url, slow.url, timed.url, main.url]) {
        expectReplayOf(await postTransfer(url, tenant, key, body), first);
      }
      // Key order, white space and number spelling do not make another request.
      expectReplayOf(
        await postTransfer(
          slow.url,
          tenant,
          key,
          `{ "to": "${body.to}", "from": "${body.from}", "amount": 25e2 }`,
        ),
        first,
      );

      expect(await listTransfers(slow.url, tenant, body.from)).toEqual([first.body]);
      expect(await listTransfers(main.url, newTenant(), body.from)).toEqual([]);
      expect(await listTransfers(main.url, tenant, body.to)).toEqual([]);
      expect(await rowsOf(tenant, body.from)).toEqual([first.body]);
    });

    it("GET /transfers lists a tenant's transfers from that customer in the order they were made; without ?from= it is 400", async () => {
      const [tenant, from] = [newTenant(), newCustomer()];
      const made: TransferView[] = [];
      for (const amount of [1, 99_999_999, 42]) {
        const res = await postTransfer(main.url, tenant, newKey(), {
          amount,
          from,
          to: newCustomer(),
        });
        expectFresh(res);
        made.push(res.body as TransferView);
      }
      expect(await listTransfers(slow.url, tenant, from)).toEqual(made);

      for (const path of ['/transfers', '/transfers?from=']) {
        const res = await getPath(main.url, path, tenant);
        expect(res.status).toBe(400);
        expect(res.body.statusCode).toBe(400);
      }
    });

    it('same key, another body: 422 key_mismatch, nothing runs', async () => {
      const [tenant, key, body] = [newTenant(), newKey(), newTransfer(300)];
      const first = await postTransfer(main.url, tenant, key, body);
      expectFresh(first);
      for (const different of [
        { ...body, amount: 301 },
        { ...body, to: `${body.to}_other` },
        { ...body, from: `${body.from}_other` },
        `{"amount":"300","from":"${body.from}","to":"${body.to}"}`,
      ]) {
        const res = await postTransfer(slow.url, tenant, key, different);
        expectProblem(res, 422, 'key_mismatch');
        expect(res.body).toEqual(KEY_MISMATCH);
        expect(res.headers['idempotent-replayed']).toBeUndefined();
      }
      expect(await rowsOf(tenant, body.from)).toEqual([first.body]);
      expect(await rowsOf(tenant, `${body.from}_other`)).toEqual([]);
      expectReplayOf(await postTransfer(main.url, tenant, key, body), first);
    });

    it.each([
      ['missing', 'key_missing', undefined],
      ['empty', 'key_invalid', ''],
      ['over 255 characters', 'key_invalid', 'k'.repeat(256)],
      ['with a space', 'key_invalid', 'a b'],
      ['not ASCII', 'key_invalid', 'caf\u00e9'],
    ])('Idempotency-Key %s: 400 %s, nothing written', async (_name, code, key) => {
      const [tenant, body] = [newTenant(), newTransfer()];
      const res = await postTransfer(main.url, tenant, key, body);
      expectProblem(res, 400, code);
      expect(await rowsOf(tenant, body.from)).toEqual([]);
    });

    it('body fails validation (or is not JSON): 400, nothing stored; the same key then works with a corrected body', async () => {
      const [tenant, key, body] = [newTenant(), newKey(), newTransfer(700)];
      const invalid: [Record<string, unknown>, string[]][] = [
        [{ ...body, amount: 0 }, ['amount must not be less than 1']],
        [{ ...body, amount: 100_000_000 }, ['amount must not be greater than 99999999']],
        [{ ...body, amount: 7.5 }, ['amount must be an integer number']],
        [{ ...body, from: '' }, ['from must be longer than or equal to 1 characters']],
        [{ ...body, to: 'x'.repeat(65) }, ['to must be shorter than or equal to 64 characters']],
        [{ ...body, extra: 1 }, ['property extra should not exist']],
      ];
      for (const [payload, messages] of invalid) {
        const res = await postTransfer(main.url, tenant, key, payload);
        expect(res.status).toBe(400);
        expect(res.body).toEqual({ message: messages, error: 'Bad Request', statusCode: 400 });
        expect(res.headers['idempotent-replayed']).toBeUndefined();
      }
      const missing = await postTransfer(main.url, tenant, key, { amount: 700, from: body.from });
      expect(missing.status).toBe(400);
      expect(missing.body.message).toContain('to must be a string');
      const broken = await postTransfer(main.url, tenant, key, `{"amount": 700, "from": "x"`);
      expect(broken.status).toBe(400);
      expect(broken.headers['idempotent-replayed']).toBeUndefined();
      expect(await rowsOf(tenant, body.from)).toEqual([]);

      const fixed = await postTransfer(main.url, tenant, key, body);
      expectFresh(fixed);
      expect(fixed.body).toEqual({ id: expect.stringMatching(UUID), ...body });
      expectReplayOf(await postTransfer(slow.url, tenant, key, body), fixed);
      expect(await rowsOf(tenant, body.from)).toEqual([fixed.body]);
    });

    it('body over 1 MiB: 413, nothing stored; the same key then works with a body of exactly 1 MiB', async () => {
      const [tenant, key, body] = [newTenant(), newKey(), newTransfer()];
      const compact = JSON.stringify(body);
      const tooLarge = await postTransfer(main.url, tenant, key, padTo(compact, MIB + 1));
      expect(tooLarge.status).toBe(413);
      expect(await rowsOf(tenant, body.from)).toEqual([]);

      const exact = await postTransfer(main.url, tenant, key, padTo(compact, MIB));
      expectFresh(exact);
      expectReplayOf(await postTransfer(slow.url, tenant, key, compact), exact);
      expect(await rowsOf(tenant, body.from)).toEqual([exact.body]);
    });

    it('401 without a valid X-Tenant-Id (POST and GET), and nothing stored for the key', async () => {
      const [tenant, key, body] = [newTenant(), newKey(), newTransfer()];
      for (const bad of [undefined, '', 'abc', '0', '-3']) {
        const post = await postTransfer(main.url, bad, key, body);
        const list = await getPath(main.url, `/transfers?from=${body.from}`, bad);
        for (const res of [post, list]) {
          expect({ tenant: bad, status: res.status, body: res.body }).toEqual({
            tenant: bad,
            status: 401,
            body: UNAUTHORIZED,
          });
        }
      }
      const made = await postTransfer(main.url, tenant, key, body);
      expectFresh(made);
      expect(await rowsOf(tenant, body.from)).toEqual([made.body]);
    });

    it('keys are scoped per tenant: one key under two tenants makes two transfers', async () => {
      const [tenantA, tenantB, key, body] = [newTenant(), newTenant(), newKey(), newTransfer()];
      const a = await postTransfer(main.url, tenantA, key, body);
      const b = await postTransfer(main.url, tenantB, key, body);
      expectFresh(a);
      expectFresh(b);
      expect(b.body.id).not.toBe(a.body.id);
      expect(await rowsOf(tenantA, body.from)).toEqual([a.body]);
      expect(await rowsOf(tenantB, body.from)).toEqual([b.body]);
    });

    it('the same key while the first request is still in its TRANSFER_DELAY_MS: 409 with Retry-After on both instances; then the 201 is replayed', async () => {
      const [tenant, key, body] = [newTenant(), newKey(), newTransfer()];
      const first = postTransfer(slow.url, tenant, key, body);
      await sleep(SLOW_DELAY_MS / 3); // claimed and written; the wait runs

      // A different request with the key is a mismatch even while it is in progress: asked
      // first, so the 409s after it prove the first request was still running (no clock read:
      // a loaded machine may take longer than the delay, and then the 409s fail, not this).
      expectProblem(
        await postTransfer(main.url, tenant, key, { ...body, amount: body.amount + 1 }),
        422,
        'key_mismatch',
      );
      for (const url of [slow.url, main.url]) {
        const busy = await postTransfer(url, tenant, key, body);
        expectInProgress(busy, 60);
        expect(busy.headers['idempotent-replayed']).toBeUndefined();
      }

      const done = await first;
      expectFresh(done);
      expect(done.body).toEqual({ id: expect.stringMatching(UUID), ...body });
      expectReplayOf(await postTransfer(main.url, tenant, key, body), done);
      expect(await rowsOf(tenant, body.from)).toEqual([done.body]);
    });
  });

  describe('exactly once, whatever happens during the wait', () => {
    it('the process SIGKILLed during the wait: after the lease another instance answers 201; one transfer row, and every retry gets that answer', async () => {
      const victim = await spawnApp({
        transferDelayMs: KILLED_DELAY_MS,
        leaseMs: SHORT_LEASE_MS,
      });
      const [tenant, key, body] = [newTenant(), newKey(), newTransfer(1700)];
      const doomed = postTransfer(victim.url, tenant, key, body).then(
        () => 'answered',
        () => 'connection lost',
      );
      await sleep(KILL_AFTER_MS); // the row is written; the wait has 1 s to go
      await victim.kill('SIGKILL');
      expect(await doomed).toBe('connection lost');

      // The dead worker's lease holds for a while (409); then `main` takes the key over.
      const { res: final, conflicts } = await retryWhileInProgress(() =>
        postTransfer(main.url, tenant, key, body),
      );
      for (const conflict of conflicts) {
        expectInProgress(conflict, Math.ceil(SHORT_LEASE_MS / 1000));
      }
      const rows = await rowsOf(tenant, body.from);
      // One summary, so that a failure shows the answer and every row at once.
      expect({ status: final.status, body: final.body as unknown, rows }).toEqual({
        status: 201,
        body: { id: expect.stringMatching(UUID), ...body },
        rows: [final.body],
      });

      for (const url of [main.url, slow.url, main.url]) {
        expectReplayOf(await postTransfer(url, tenant, key, body), final);
      }
      expect(await listTransfers(slow.url, tenant, body.from)).toEqual([final.body]);
      expect(await rowsOf(tenant, body.from)).toEqual([final.body]);
    });

    it('the global timeout (REQUEST_TIMEOUT_MS) fires during the wait: 408, not stored; 409 while the handler runs; then 201 replayed, one transfer row', async () => {
      const [tenant, key, body] = [newTenant(), newKey(), newTransfer(1800)];
      const started = Date.now();
      const timedOut = await postTransfer(timed.url, tenant, key, body);
      expect(timedOut.status).toBe(408);
      expect(timedOut.headers['idempotent-replayed']).toBeUndefined();

      // The handler still runs and owns the key: so the 408 was the timeout's answer, not one
      // that waited for the handler (no clock read: a loaded machine stretches any bound).
      for (const url of [timed.url, main.url]) {
        expectInProgress(
          await postTransfer(url, tenant, key, body),
          Math.ceil(SHORT_LEASE_MS / 1000),
        );
      }

      // Past the wait, and past the lease too: the handler's answer is stored by then, and a
      // lease that ran out must not let anyone run the handler a second time.
      await sleep(
        Math.max(0, started + Math.max(TIMED_DELAY_MS, SHORT_LEASE_MS) + 500 - Date.now()),
      );
      const after = await postTransfer(main.url, tenant, key, body);
      const rows = await rowsOf(tenant, body.from);
      expect({
        status: after.status,
        replayed: after.headers['idempotent-replayed'],
        body: after.body as unknown,
        rows,
      }).toEqual({
        status: 201,
        replayed: 'true',
        body: { id: expect.stringMatching(UUID), ...body },
        rows: [after.body],
      });

      for (const url of [timed.url, slow.url]) {
        expectReplayOf(await postTransfer(url, tenant, key, body), after);
      }
      expect(await listTransfers(main.url, tenant, body.from)).toEqual([after.body]);
      expect(await rowsOf(tenant, body.from)).toEqual([after.body]);
    });

    it('the database lost after the write: 503 with Retry-After; once it is back a retry gets 201, one transfer row, and later retries replay it', async () => {
      const [tenant, key, body] = [newTenant(), newKey(), newTransfer(1900)];
      const pending = postTransfer(flakyDb.url, tenant, key, body);
      await sleep(CUT_AFTER_MS); // the row is written; the wait runs
      await dbProxy.refuse();
      let lost: Res;
      try {
        lost = await pending;
      } finally {
        await dbProxy.restore();
      }
      expect(lost.status).toBe(503);
      expect(lost.headers['content-type']).toMatch(PROBLEM);
      expect(lost.headers['retry-after']).toMatch(/^\d+$/);
      expect(lost.headers['idempotent-replayed']).toBeUndefined();

      // The lease may still hold (it could not be given back while the database was away).
      const { res: back, conflicts } = await retryWhileInProgress(() =>
        postTransfer(flakyDb.url, tenant, key, body),
      );
      for (const conflict of conflicts) {
        expectInProgress(conflict, Math.ceil(SHORT_LEASE_MS / 1000));
      }
      const rows = await rowsOf(tenant, body.from);
      expect({ status: back.status, body: back.body as unknown, rows }).toEqual({
        status: 201,
        body: { id: expect.stringMatching(UUID), ...body },
        rows: [back.body],
      });

      for (const url of [flakyDb.url, main.url]) {
        expectReplayOf(await postTransfer(url, tenant, key, body), back);
      }
      expect(await listTransfers(main.url, tenant, body.from)).toEqual([back.body]);
      expect(await rowsOf(tenant, body.from)).toEqual([back.body]);
    });
  });
});
