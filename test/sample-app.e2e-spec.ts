import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { type Authorization, startFakePsp, type FakePsp } from '../sample-app/psp/fake-psp.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import {
  type SampleAppAdapter,
  type SampleAppSettings,
  startSampleApp,
  startStandaloneApp,
  startStandalonePsp,
  stopGracefully,
  viaPort,
  type WorkerProcess,
} from './support/sample-app-process.js';
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
  type Res,
  retryWhileInProgress,
  sleep,
  UNAUTHORIZED,
  UUID,
} from './support/sample-app-http.js';
import { TcpProxy } from './support/tcp-proxy.js';

/**
 * The sample app (`sample-app/`) driven as a black box, over HTTP, as its contract
 * (`sample-app-contract.md`) fixes it: real app processes (compiled, started with
 * `node dist/sample-app/main.js`), real PostgreSQL, the fake PSP in this process (so it
 * survives a killed app), TCP proxies to cut the PSP or the database, and real concurrency.
 */

const ADAPTERS: SampleAppAdapter[] = ['express', 'fastify'];
/** The lease of the instances that tests kill or let stall, so that a takeover comes quickly. */
const SHORT_LEASE_MS = 1500;
/** `PSP_TIMEOUT_MS` of the main instance: a PSP slower than this is "not answering in time". */
const MAIN_PSP_TIMEOUT_MS = 2500;
/** `IDEMPOTENCY_RETENTION_MS` of the instance whose finished keys expire quickly. */
const SHORT_RETENTION_MS = 1500;

interface ChargeBody {
  amount: number;
  currency: string;
  customer: string;
}

const chargeBody = (customer: string, amount = 100, currency = 'eur'): ChargeBody => ({
  amount,
  currency,
  customer,
});

/** `POST /charges`; a string payload is sent as is, as `application/json`. */
function postCharge(
  url: string,
  tenant: string | undefined,
  key: string | undefined,
  payload: ChargeBody | Record<string, unknown> | string,
): Promise<Res> {
  let req = request(url).post('/charges');
  if (tenant !== undefined) req = req.set('X-Tenant-Id', tenant);
  if (key !== undefined) req = req.set('Idempotency-Key', key);
  if (typeof payload === 'string') req = req.set('Content-Type', 'application/json');
  // `then` starts the request now, so that callers can run several at once.
  return req.send(payload).then((res) => res);
}

function postWebhook(
  url: string,
  tenant: string | undefined,
  event: Record<string, unknown>,
): Promise<Res> {
  let req = request(url).post('/webhooks/psp');
  if (tenant !== undefined) req = req.set('X-Tenant-Id', tenant);
  return req.send(event).then((res) => res);
}

interface ChargeView extends ChargeBody {
  id: string;
  status: string;
  psp_authorization: string | null;
  amount_refunded: number;
}

/** `GET /charges?customer=`: the tenant's charges for that customer. */
async function listCharges(url: string, tenant: string, customer: string): Promise<ChargeView[]> {
  const res = await getPath(url, `/charges?customer=${encodeURIComponent(customer)}`, tenant);
  expect(res.status).toBe(200);
  expect(Array.isArray(res.body)).toBe(true);
  return res.body as ChargeView[];
}

async function getCharge(url: string, tenant: string, id: string): Promise<ChargeView> {
  const res = await getPath(url, `/charges/${id}`, tenant);
  expect(res.status).toBe(200);
  return res.body as ChargeView;
}

describe.each(ADAPTERS)('the sample app on %s', (adapter) => {
  let database: TestDatabase;
  /**
   * The database of the `expiring` instance alone: its purge deletes every key older than its
   * own retention, whichever instance wrote it, so it must not share the others' database.
   */
  let retentionDatabase: TestDatabase;
  let psp: FakePsp;
  /** Between the main instance and the PSP: cut to make the PSP unreachable. */
  let pspProxy: TcpProxy;
  /** Between the `flakyDb` instance and PostgreSQL: cut to make the database unreachable. */
  let dbProxy: TcpProxy;
  /** Reaches the PSP through `pspProxy`, `PSP_TIMEOUT_MS` 2500, the default lease. */
  let main: WorkerProcess;
  /** A second instance on the same database and PSP, the default lease and PSP timeout. */
  let peer: WorkerProcess;
  /** A third instance with a short lease: the worker that stalls and loses its lease. */
  let shortLease: WorkerProcess;
  /** Reaches PostgreSQL through `dbProxy`, with a short lease. */
  let flakyDb: WorkerProcess;
  /** Keeps finished keys 1.5 s only, and purges every 250 ms; on `retentionDatabase`. */
  let expiring: WorkerProcess;
  const spawned: WorkerProcess[] = [];

  let seq = 0;
  const run = Date.now().toString(36);
  const newKey = () => `key-${adapter}-${run}-${++seq}`;
  const newCustomer = () => `cus_${adapter}_${run}_${++seq}`;
  /** A tenant of the test's own, so that its charges and keys are its own too. */
  const newTenant = () => String(1000 + ++seq);

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

  /** The PSP's own record (`GET /v1/authorizations?customer=`). */
  const authorizations = async (customer: string): Promise<Authorization[]> => {
    const res = await request(psp.url).get('/v1/authorizations').query({ customer });
    expect(res.status).toBe(200);
    return res.body as Authorization[];
  };

  beforeAll(async () => {
    database = await createTestDatabase(`sample_app_${adapter}`);
    retentionDatabase = await createTestDatabase(`sample_app_retention_${adapter}`);
    psp = await startFakePsp();
    pspProxy = new TcpProxy('127.0.0.1', psp.port);
    await pspProxy.start();
    const target = new URL(database.url);
    dbProxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await dbProxy.start();

    // All five start at once on fresh databases: they migrate once, under the app's lock.
    const start = (settings: Partial<SampleAppSettings>) =>
      startSampleApp({ adapter, databaseUrl: database.url, pspUrl: psp.url, ...settings });
    const all = await Promise.allSettled([
      start({ pspUrl: `http://127.0.0.1:${pspProxy.port}`, pspTimeoutMs: MAIN_PSP_TIMEOUT_MS }),
      start({}),
      // A live instance whose lease runs out (its lease_lost test): no heartbeat renews it.
      start({ leaseMs: SHORT_LEASE_MS, heartbeat: false }),
      start({ leaseMs: SHORT_LEASE_MS, databaseUrl: viaPort(database.url, dbProxy.port) }),
      start({
        retentionMs: SHORT_RETENTION_MS,
        purgeIntervalMs: 250,
        databaseUrl: retentionDatabase.url,
      }),
    ]);
    const started = all.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    const failed = all.find((o): o is PromiseRejectedResult => o.status === 'rejected');
    if (failed) {
      await Promise.all(started.map((app) => app.kill('SIGKILL')));
      throw failed.reason;
    }
    [main, peer, shortLease, flakyDb, expiring] = started;
  });

  afterEach(async () => {
    if (psp) psp.delayMs = 0;
    await Promise.all(spawned.splice(0).map((app) => app.kill('SIGKILL')));
  });

  afterAll(async () => {
    await Promise.all(
      [main, peer, shortLease, flakyDb, expiring].filter(Boolean).map((app) => app.kill('SIGKILL')),
    );
    await pspProxy?.stop();
    await dbProxy?.stop();
    await psp?.close();
    await database?.drop();
    await retentionDatabase?.drop();
  });

  it(`serves with the adapter HTTP_ADAPTER names (${adapter})`, async () => {
    // Express announces itself in X-Powered-By; Fastify sends no such header.
    for (const app of [main, peer, shortLease, flakyDb, expiring]) {
      const res = await getPath(app.url, '/charges?customer=nobody', newTenant());
      expect(res.status).toBe(200);
      expect(res.headers['x-powered-by']).toBe(adapter === 'express' ? 'Express' : undefined);
    }
  });

  describe('POST /charges: outcomes', () => {
    it('success: 201 with exactly {id, amount, currency, customer, status: "succeeded", psp_authorization}', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const res = await postCharge(main.url, tenant, key, chargeBody(customer, 1234, 'usd'));
      expectFresh(res);
      expect(res.headers['content-type']).toMatch(JSON_TYPE);
      expect(res.body).toEqual({
        id: expect.stringMatching(UUID),
        amount: 1234,
        currency: 'usd',
        customer,
        status: 'succeeded',
        psp_authorization: expect.any(String),
      });
      expect(Object.keys(res.body).sort()).toEqual(
        ['amount', 'currency', 'customer', 'id', 'psp_authorization', 'status'].sort(),
      );

      // The PSP made exactly this authorization, and the app recorded its id on the charge.
      const made = await authorizations(customer);
      expect(made).toEqual([
        { id: res.body.psp_authorization, amount: 1234, currency: 'usd', customer },
      ]);
      const view = { ...res.body, amount_refunded: 0 };
      expect(await getCharge(peer.url, tenant, res.body.id)).toEqual(view);
      expect(await listCharges(peer.url, tenant, customer)).toEqual([view]);
    });

    it('accepts the bounds: amount 1 and 99999999, a 64-character customer', async () => {
      const tenant = newTenant();
      const longCustomer = `c${'x'.repeat(63)}`;
      const low = await postCharge(main.url, tenant, newKey(), chargeBody(newCustomer(), 1));
      const high = await postCharge(
        main.url,
        tenant,
        newKey(),
        chargeBody(longCustomer, 99_999_999, 'jpy'),
      );
      expectFresh(low);
      expect(low.body).toMatchObject({ amount: 1, status: 'succeeded' });
      expectFresh(high);
      expect(high.body).toMatchObject({
        amount: 99_999_999,
        currency: 'jpy',
        customer: longCustomer,
      });
    });

    it('customer cus_decline: the PSP answers 402, the app 402 card_declined, stored and replayed', async () => {
      const [tenant, key] = [newTenant(), newKey()];
      const first = await postCharge(main.url, tenant, key, chargeBody('cus_decline', 500));
      expectFresh(first, 402);
      expect(first.headers['content-type']).toMatch(JSON_TYPE);
      expect(first.body.error).toBe('card_declined');
      const requests = psp.requestCount();

      const replay = await postCharge(peer.url, tenant, key, chargeBody('cus_decline', 500));
      expectReplayOf(replay, first);
      expectReplayOf(
        await postCharge(main.url, tenant, key, chargeBody('cus_decline', 500)),
        first,
      );
      expect(psp.requestCount()).toBe(requests); // a replay does not ask the PSP again

      const charges = await listCharges(main.url, tenant, 'cus_decline');
      expect(charges).toHaveLength(1);
      expect(charges[0]).toMatchObject({
        amount: 500,
        status: 'declined',
        psp_authorization: null,
      });
    });

    it('customer cus_psp_error: the PSP answers 500, the app 502 psp_unavailable, stored and replayed', async () => {
      const [tenant, key] = [newTenant(), newKey()];
      const first = await postCharge(main.url, tenant, key, chargeBody('cus_psp_error', 700));
      expectFresh(first, 502);
      expect(first.headers['content-type']).toMatch(JSON_TYPE);
      expect(first.body.error).toBe('psp_unavailable');
      const requests = psp.requestCount();

      expectReplayOf(
        await postCharge(peer.url, tenant, key, chargeBody('cus_psp_error', 700)),
        first,
      );
      expectReplayOf(
        await postCharge(main.url, tenant, key, chargeBody('cus_psp_error', 700)),
        first,
      );
      expect(psp.requestCount()).toBe(requests);

      const charges = await listCharges(main.url, tenant, 'cus_psp_error');
      expect(charges).toHaveLength(1);
      expect(charges[0]).toMatchObject({ amount: 700, status: 'failed', psp_authorization: null });
    });

    it('PSP unreachable: 503 with Retry-After, nothing stored, lease released; once the PSP is back a retry resumes and charges once', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      let pending: ChargeView[];
      await pspProxy.refuse();
      try {
        const down = await postCharge(main.url, tenant, key, chargeBody(customer));
        expectProblem(down, 503, 'retry_later');
        expect(down.headers['retry-after']).toBe('1');
        expect(down.body.error).toBe('psp_unreachable');
        expect(down.headers['idempotent-replayed']).toBeUndefined();

        // Phase one (the pending charge) is committed; the 503 itself is not stored.
        pending = await listCharges(main.url, tenant, customer);
        expect(pending).toEqual([
          expect.objectContaining({ status: 'pending', psp_authorization: null }),
        ]);

        // The lease was released: a retry runs at once (another 503), not a 409.
        const again = await postCharge(main.url, tenant, key, chargeBody(customer));
        expectProblem(again, 503, 'retry_later');
        expect(again.headers['retry-after']).toBe('1');
      } finally {
        await pspProxy.restore();
      }

      const back = await postCharge(main.url, tenant, key, chargeBody(customer));
      expectFresh(back);
      expect(back.body).toMatchObject({ id: pending[0].id, status: 'succeeded', customer });
      const charges = await listCharges(peer.url, tenant, customer);
      expect(charges).toEqual([
        expect.objectContaining({ id: pending[0].id, status: 'succeeded' }),
      ]);
      expect(await authorizations(customer)).toEqual([
        expect.objectContaining({ id: back.body.psp_authorization }),
      ]);
      expectReplayOf(await postCharge(peer.url, tenant, key, chargeBody(customer)), back);
    });

    it('PSP not answering in time (PSP_TIMEOUT_MS): 503, nothing stored; the retry calls the PSP with the same derived key (one authorization)', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      psp.delayMs = 4000;
      const requests = psp.requestCount();
      const started = Date.now();
      const slow = await postCharge(main.url, tenant, key, chargeBody(customer));
      const waited = Date.now() - started;
      expectProblem(slow, 503, 'retry_later');
      expect(slow.headers['retry-after']).toBe('1');
      expect(waited).toBeGreaterThanOrEqual(MAIN_PSP_TIMEOUT_MS - 100);
      expect(waited).toBeLessThan(4000);
      const pending = await listCharges(main.url, tenant, customer);
      expect(pending).toEqual([expect.objectContaining({ status: 'pending' })]);

      // The PSP finishes the first call later; the retry must get that authorization back.
      psp.delayMs = 0;
      const back = await postCharge(main.url, tenant, key, chargeBody(customer));
      expectFresh(back);
      expect(back.body).toMatchObject({ id: pending[0].id, status: 'succeeded' });
      // Count only once the PSP's first (slow) call has surely completed.
      await sleep(Math.max(0, started + 4500 - Date.now()));
      expect(psp.requestCount() - requests).toBe(2);
      expect(await authorizations(customer)).toEqual([
        expect.objectContaining({ id: back.body.psp_authorization }),
      ]);
      expect(await listCharges(peer.url, tenant, customer)).toHaveLength(1);
      expectReplayOf(await postCharge(main.url, tenant, key, chargeBody(customer)), back);
    });
  });

  describe('POST /charges: requests refused before anything runs', () => {
    it('body fails validation: 400, nothing stored; the same key then works with a corrected body', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const invalid: [Record<string, unknown>, string[]][] = [
        [{ amount: 0, currency: 'eur', customer }, ['amount must not be less than 1']],
        [
          { amount: 100_000_000, currency: 'eur', customer },
          ['amount must not be greater than 99999999'],
        ],
        [{ amount: 100.5, currency: 'eur', customer }, ['amount must be an integer number']],
        [{ amount: 100, currency: 'EUR', customer }, ['currency must be 3 lower-case letters']],
        [{ amount: 100, currency: 'euro', customer }, ['currency must be 3 lower-case letters']],
        [
          { amount: 100, currency: 'eur', customer: '' },
          ['customer must be longer than or equal to 1 characters'],
        ],
        [
          { amount: 100, currency: 'eur', customer: 'x'.repeat(65) },
          ['customer must be shorter than or equal to 64 characters'],
        ],
        [{ amount: 100, currency: 'eur', customer, extra: 1 }, ['property extra should not exist']],
      ];
      const requests = psp.requestCount();
      for (const [payload, messages] of invalid) {
        const res = await postCharge(main.url, tenant, key, payload);
        expect(res.status).toBe(400);
        expect(res.body).toEqual({ message: messages, error: 'Bad Request', statusCode: 400 });
      }
      const missing = await postCharge(main.url, tenant, key, { currency: 'eur', customer });
      expect(missing.status).toBe(400);
      expect(missing.body.message).toContain('amount must be an integer number');
      expect(psp.requestCount()).toBe(requests);
      expect(await listCharges(main.url, tenant, customer)).toEqual([]);

      const fixed = await postCharge(main.url, tenant, key, chargeBody(customer, 100));
      expectFresh(fixed);
      expect(fixed.body).toMatchObject({ amount: 100, customer, status: 'succeeded' });
      expectReplayOf(await postCharge(peer.url, tenant, key, chargeBody(customer, 100)), fixed);
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
    });

    it('Idempotency-Key missing: 400 key_missing, nothing charged', async () => {
      const [tenant, customer] = [newTenant(), newCustomer()];
      const requests = psp.requestCount();
      const res = await postCharge(main.url, tenant, undefined, chargeBody(customer));
      expectProblem(res, 400, 'key_missing');
      expect(res.body.detail).toBe(
        'The Idempotency-Key header is required on this route; send one key per operation.',
      );
      expect(psp.requestCount()).toBe(requests);
      expect(await listCharges(main.url, tenant, customer)).toEqual([]);
    });

    it.each([
      ['empty', '', 'it is empty'],
      ['an empty structured-field string', '""', 'it is empty'],
      ['over 255 characters', 'k'.repeat(256), 'it is longer than 255 characters'],
      [
        'over 255 characters in the structured-field form',
        `"${'k'.repeat(256)}"`,
        'it is longer than 255 characters',
      ],
      ['not ASCII', 'caf\u00e9', 'it must be visible ASCII characters only (no spaces)'],
      ['with a space', 'a b', 'it must be visible ASCII characters only (no spaces)'],
      ['with a tab', 'a\tb', 'it must be visible ASCII characters only (no spaces)'],
    ])('Idempotency-Key %s: 400 key_invalid, nothing charged', async (_name, key, reason) => {
      const [tenant, customer] = [newTenant(), newCustomer()];
      const requests = psp.requestCount();
      const res = await postCharge(main.url, tenant, key, chargeBody(customer));
      expectProblem(res, 400, 'key_invalid');
      expect(res.body.detail).toBe(`The Idempotency-Key header is invalid: ${reason}.`);
      expect(psp.requestCount()).toBe(requests);
      expect(await listCharges(main.url, tenant, customer)).toEqual([]);
    });

    it('a key of exactly 255 visible ASCII characters is accepted', async () => {
      const [tenant, customer] = [newTenant(), newCustomer()];
      const key = `${newKey()}-!~{}`.padEnd(255, 'z');
      expect(key).toHaveLength(255);
      const first = await postCharge(main.url, tenant, key, chargeBody(customer));
      expectFresh(first);
      expectReplayOf(await postCharge(peer.url, tenant, key, chargeBody(customer)), first);
    });

    it('a number of over 1,000 digits (mantissa or exponent) or nesting deeper than 64: 400, nothing stored; the same key then works', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const body = (amount: string, extra = '') =>
        `{"amount": ${amount}, "currency": "eur", "customer": "${customer}"${extra}}`;
      for (const hostile of [
        body('1'.repeat(1001)),
        body(`1.${'0'.repeat(1000)}`),
        body(`1e${'9'.repeat(1001)}`),
        // The body that held the event loop for 430 ms: an exponent of ~1 million digits.
        body(`1e${'9'.repeat(1024 * 1024 - 200)}`),
        body('100', `, "deep": ${'['.repeat(65)}${']'.repeat(65)}`),
      ]) {
        const res = await postCharge(main.url, tenant, key, hostile);
        expectProblem(res, 400, 'request_invalid');
        expect(res.headers['idempotent-replayed']).toBeUndefined();
      }
      expect(await listCharges(main.url, tenant, customer)).toEqual([]);
      // At the bounds, a body is taken (and refused by validation, not by its shape).
      const atBounds = await postCharge(
        main.url,
        tenant,
        key,
        body('100', `, "deep": ${'['.repeat(63)}${']'.repeat(63)}`),
      );
      expect(atBounds.status).toBe(400);
      expect(atBounds.body.code).toBeUndefined(); // ValidationPipe: unknown field "deep"

      const fixed = await postCharge(main.url, tenant, key, chargeBody(customer));
      expectFresh(fixed);
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
    });

    it('body not valid JSON: 400, nothing stored; the same key then works', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      for (const broken of [
        `{"amount": 100, "currency": "eur", "customer": "${customer}"`,
        `{"amount": 100 "currency": "eur", "customer": "${customer}"}`,
        `{'amount': 100, 'currency': 'eur', 'customer': '${customer}'}`,
      ]) {
        const res = await postCharge(main.url, tenant, key, broken);
        expect(res.status).toBe(400);
        expect(res.body.statusCode).toBe(400);
        expect(res.headers['idempotent-replayed']).toBeUndefined();
      }
      expect(await listCharges(main.url, tenant, customer)).toEqual([]);

      const fixed = await postCharge(main.url, tenant, key, chargeBody(customer));
      expectFresh(fixed);
      expect(fixed.body).toMatchObject({ customer, status: 'succeeded' });
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
    });

    it('body over 1 MiB: 413, nothing stored; the same key then works with a body of exactly 1 MiB', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const compact = JSON.stringify(chargeBody(customer));
      const requests = psp.requestCount();

      const tooLarge = await postCharge(main.url, tenant, key, padTo(compact, MIB + 1));
      expect(tooLarge.status).toBe(413);
      expect(tooLarge.body.statusCode).toBe(413);
      expect(psp.requestCount()).toBe(requests);
      expect(await listCharges(main.url, tenant, customer)).toEqual([]);

      const exact = await postCharge(main.url, tenant, key, padTo(compact, MIB));
      expectFresh(exact);
      expect(exact.body).toMatchObject({ customer, status: 'succeeded' });
      // The padding is white space: the compact body is the same request.
      expectReplayOf(await postCharge(peer.url, tenant, key, compact), exact);
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
    });

    it('answers 401 without a valid X-Tenant-Id on every route (charges, reads, webhooks), and stores nothing', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const existing = await postCharge(main.url, tenant, newKey(), chargeBody(customer, 900));
      expectFresh(existing);
      const event = {
        id: `evt_${randomUUID()}`,
        type: 'refund',
        charge: existing.body.id,
        amount: 40,
      };
      const requests = psp.requestCount();

      for (const bad of [undefined, '', 'abc', '0', '-3', '2.5', '7abc', '0x10']) {
        const label = `X-Tenant-Id ${JSON.stringify(bad)}`;
        const answers = {
          post: await postCharge(main.url, bad, key, chargeBody(customer)),
          list: await getPath(main.url, `/charges?customer=${customer}`, bad),
          get: await getPath(main.url, `/charges/${existing.body.id}`, bad),
          webhook: await postWebhook(main.url, bad, event),
        };
        for (const [route, res] of Object.entries(answers)) {
          expect({ label, route, status: res.status, body: res.body }).toEqual({
            label,
            route,
            status: 401,
            body: UNAUTHORIZED,
          });
        }
      }
      expect(psp.requestCount()).toBe(requests);

      // Nothing was stored for the key nor recorded for the event: both run now, once.
      const charged = await postCharge(main.url, tenant, key, chargeBody(customer));
      expectFresh(charged);
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(2);
      const delivered = await postWebhook(main.url, tenant, event);
      expect(delivered.status).toBe(200);
      expect(delivered.body).toEqual({ duplicate: false });
      expect((await getCharge(main.url, tenant, existing.body.id)).amount_refunded).toBe(40);
    });
  });

  describe('POST /charges: same key again', () => {
    it('replay of a finished key: the stored status, byte-identical body, Idempotent-Replayed: true, on any instance', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const first = await postCharge(main.url, tenant, key, chargeBody(customer, 4200));
      expectFresh(first);
      const requests = psp.requestCount();
      for (const url of [main.url, peer.url, shortLease.url, main.url]) {
        expectReplayOf(await postCharge(url, tenant, key, chargeBody(customer, 4200)), first);
      }
      expect(psp.requestCount()).toBe(requests);
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
      expect(await authorizations(customer)).toHaveLength(1);
    });

    it('structured-field form: Idempotency-Key "K" is the same key as K (both ways, escapes included)', async () => {
      const [tenant, customer] = [newTenant(), newCustomer()];
      const key = newKey();
      const quotedFirst = await postCharge(main.url, tenant, `"${key}"`, chargeBody(customer));
      expectFresh(quotedFirst);
      expectReplayOf(await postCharge(peer.url, tenant, key, chargeBody(customer)), quotedFirst);

      const other = newKey();
      const bareFirst = await postCharge(main.url, tenant, other, chargeBody(customer));
      expectFresh(bareFirst);
      expectReplayOf(
        await postCharge(main.url, tenant, `"${other}"`, chargeBody(customer)),
        bareFirst,
      );

      // `"a\"b\\c"` is the key a"b\c.
      const escaped = `${newKey()}"q\\s`;
      const sf = `"${escaped.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
      const escapedFirst = await postCharge(main.url, tenant, sf, chargeBody(customer));
      expectFresh(escapedFirst);
      expectReplayOf(
        await postCharge(peer.url, tenant, escaped, chargeBody(customer)),
        escapedFirst,
      );

      expect(await listCharges(main.url, tenant, customer)).toHaveLength(3);
    });

    it('canonical body: key order, white space and 1 / 1.0 / 1e0 are the same request', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const first = await postCharge(
        main.url,
        tenant,
        key,
        `{"amount":1,"currency":"eur","customer":"${customer}"}`,
      );
      expectFresh(first);
      expect(first.body).toMatchObject({ amount: 1 });
      const requests = psp.requestCount();
      for (const same of [
        `{"customer":"${customer}","currency":"eur","amount":1}`,
        `\n{ "amount" : 1 ,\t"currency" : "eur" ,\r\n  "customer" : "${customer}" }\n`,
        `{"amount":1.0,"currency":"eur","customer":"${customer}"}`,
        `{"amount":1e0,"currency":"eur","customer":"${customer}"}`,
        `{"currency":"eur","amount":1.000E+0,"customer":"${customer}"}`,
        `{"customer": "${customer}", "amount": 10e-1, "currency": "eur"}`,
      ]) {
        expectReplayOf(await postCharge(peer.url, tenant, key, same), first);
      }
      expect(psp.requestCount()).toBe(requests);
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
    });

    it('amount 100.0 is the integer 100, and the same request as 100 and 1e2', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const first = await postCharge(
        main.url,
        tenant,
        key,
        `{"amount":100.0,"currency":"eur","customer":"${customer}"}`,
      );
      expectFresh(first);
      expect(first.body).toMatchObject({ amount: 100, status: 'succeeded' });
      expect(first.text).toContain('"amount":100,');
      expectReplayOf(await postCharge(main.url, tenant, key, chargeBody(customer, 100)), first);
      expectReplayOf(
        await postCharge(
          peer.url,
          tenant,
          key,
          `{"amount":1e2,"currency":"eur","customer":"${customer}"}`,
        ),
        first,
      );
      const charges = await listCharges(main.url, tenant, customer);
      expect(charges).toEqual([expect.objectContaining({ amount: 100 })]);
      expect(await authorizations(customer)).toEqual([expect.objectContaining({ amount: 100 })]);
    });

    it('same key, different body: 422 key_mismatch, nothing runs', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const first = await postCharge(main.url, tenant, key, chargeBody(customer, 300));
      expectFresh(first);
      const requests = psp.requestCount();
      for (const different of [
        chargeBody(customer, 301),
        chargeBody(customer, 300, 'usd'),
        chargeBody(`${customer}_other`, 300),
        `{"amount":"300","currency":"eur","customer":"${customer}"}`,
      ]) {
        const res = await postCharge(peer.url, tenant, key, different);
        expectProblem(res, 422, 'key_mismatch');
        expect(res.body).toEqual(KEY_MISMATCH);
        expect(res.headers['idempotent-replayed']).toBeUndefined();
      }
      expect(psp.requestCount()).toBe(requests);
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
      expect(await listCharges(main.url, tenant, `${customer}_other`)).toEqual([]);
      expectReplayOf(await postCharge(main.url, tenant, key, chargeBody(customer, 300)), first);
    });

    it('same key while a slow PSP call holds the lease: 409 with Retry-After (seconds), on both instances', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      psp.delayMs = 1500;
      const called = psp.nextRequest();
      const first = postCharge(peer.url, tenant, key, chargeBody(customer));
      await called; // the first request holds the key and waits on the PSP

      const samePeer = await postCharge(peer.url, tenant, key, chargeBody(customer));
      const otherInstance = await postCharge(main.url, tenant, key, chargeBody(customer));
      for (const busy of [samePeer, otherInstance]) {
        expectInProgress(busy, 60);
        expect(busy.body.detail).toBe(
          'A request with this idempotency key is still being processed; retry later.',
        );
      }
      // A different request with the key is a mismatch even while it is in progress.
      expectProblem(
        await postCharge(main.url, tenant, key, chargeBody(customer, 101)),
        422,
        'key_mismatch',
      );

      const done = await first;
      expectFresh(done);
      expect(done.body).toMatchObject({ customer, status: 'succeeded' });
      expectReplayOf(await postCharge(main.url, tenant, key, chargeBody(customer)), done);
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
      expect(await authorizations(customer)).toHaveLength(1);
    });
  });

  describe('tenants', () => {
    it('keys are scoped per tenant: the same key under two tenants makes two charges', async () => {
      const [tenantA, tenantB, tenantC, key, customer] = [
        newTenant(),
        newTenant(),
        newTenant(),
        newKey(),
        newCustomer(),
      ];
      const a = await postCharge(main.url, tenantA, key, chargeBody(customer));
      const b = await postCharge(main.url, tenantB, key, chargeBody(customer));
      expectFresh(a);
      expectFresh(b);
      expect(b.body.id).not.toBe(a.body.id);
      expect(b.body.psp_authorization).not.toBe(a.body.psp_authorization);
      // Under a third tenant the key is new too: another body is no mismatch there.
      const c = await postCharge(main.url, tenantC, key, chargeBody(customer, 555));
      expectFresh(c);

      expectReplayOf(await postCharge(peer.url, tenantA, key, chargeBody(customer)), a);
      expectReplayOf(await postCharge(peer.url, tenantB, key, chargeBody(customer)), b);
      expect(await listCharges(main.url, tenantA, customer)).toEqual([
        expect.objectContaining({ id: a.body.id }),
      ]);
      expect(await listCharges(main.url, tenantB, customer)).toEqual([
        expect.objectContaining({ id: b.body.id }),
      ]);
      expect(await authorizations(customer)).toHaveLength(3);
    });

    it("GET /charges/:id answers 404 for another tenant's charge; GET /charges?customer= lists only the tenant's", async () => {
      const [owner, stranger, customer] = [newTenant(), newTenant(), newCustomer()];
      const created = await postCharge(main.url, owner, newKey(), chargeBody(customer));
      expectFresh(created);
      const id = created.body.id as string;

      expect(await getCharge(peer.url, owner, id)).toEqual({ ...created.body, amount_refunded: 0 });
      const foreign = await getPath(peer.url, `/charges/${id}`, stranger);
      expect(foreign.status).toBe(404);
      expect(foreign.body).toEqual({ error: 'not_found', message: `no charge ${id}` });
      const unknown = randomUUID();
      const missing = await getPath(peer.url, `/charges/${unknown}`, owner);
      expect(missing.status).toBe(404);
      expect(missing.body).toEqual({ error: 'not_found', message: `no charge ${unknown}` });

      expect(await listCharges(peer.url, stranger, customer)).toEqual([]);
      expect(await listCharges(peer.url, owner, customer)).toEqual([
        { ...created.body, amount_refunded: 0 },
      ]);
    });
  });

  describe('crashes, takeovers and concurrency', () => {
    it('an instance SIGKILLed while waiting on a slow PSP is taken over after the lease: one charge, one PSP authorization', async () => {
      const victim = await spawnApp({ leaseMs: SHORT_LEASE_MS });
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      psp.delayMs = 2500;
      const requests = psp.requestCount();
      const called = psp.nextRequest();
      const doomed = postCharge(victim.url, tenant, key, chargeBody(customer)).then(
        () => 'answered',
        () => 'connection lost',
      );
      await called; // the victim committed its charge row and now waits on the PSP
      await victim.kill('SIGKILL');
      expect(await doomed).toBe('connection lost');
      const pending = await listCharges(peer.url, tenant, customer);
      expect(pending).toEqual([
        expect.objectContaining({ status: 'pending', psp_authorization: null }),
      ]);

      // The dead worker's lease still holds for a while: 409; then the peer takes the key over.
      const { res: final, conflicts } = await retryWhileInProgress(() =>
        postCharge(peer.url, tenant, key, chargeBody(customer)),
      );
      expect(conflicts.length).toBeGreaterThan(0);
      for (const conflict of conflicts)
        expectInProgress(conflict, Math.ceil(SHORT_LEASE_MS / 1000));
      expectFresh(final);
      expect(final.body).toEqual({
        id: pending[0].id,
        amount: 100,
        currency: 'eur',
        customer,
        status: 'succeeded',
        psp_authorization: expect.any(String),
      });

      expect(await listCharges(main.url, tenant, customer)).toEqual([
        { ...final.body, amount_refunded: 0 },
      ]);
      // The PSP was called twice with one derived key, and authorized once.
      expect(psp.requestCount() - requests).toBe(2);
      expect(await authorizations(customer)).toEqual([
        { id: final.body.psp_authorization, amount: 100, currency: 'eur', customer },
      ]);
      expectReplayOf(await postCharge(main.url, tenant, key, chargeBody(customer)), final);
    });

    it("a worker that lost its lease gets 409 lease_lost; the new owner's 201 is what is stored and replayed", async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      psp.delayMs = 4000;
      const requests = psp.requestCount();
      const called = psp.nextRequest();
      const stalled = postCharge(shortLease.url, tenant, key, chargeBody(customer));
      await called; // A has claimed the key (lease 1.5 s) and waits ~4 s on the PSP
      await sleep(SHORT_LEASE_MS + 300);

      const taker = await postCharge(peer.url, tenant, key, chargeBody(customer));
      expectFresh(taker);
      expect(taker.body).toMatchObject({ customer, status: 'succeeded' });

      const late = await stalled;
      expectProblem(late, 409, 'lease_lost');
      expect(late.headers['retry-after']).toMatch(/^\d+$/);
      expect(late.headers['idempotent-replayed']).toBeUndefined();

      expectReplayOf(await postCharge(shortLease.url, tenant, key, chargeBody(customer)), taker);
      expectReplayOf(await postCharge(main.url, tenant, key, chargeBody(customer)), taker);
      expect(await listCharges(main.url, tenant, customer)).toEqual([
        { ...taker.body, amount_refunded: 0 },
      ]);
      expect(psp.requestCount() - requests).toBe(2);
      expect(await authorizations(customer)).toEqual([
        expect.objectContaining({ id: taker.body.psp_authorization }),
      ]);
    });

    it('two instances hammered concurrently with one key: one charge; every answer is 201 (original or identical replay) or 409', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      psp.delayMs = 300;
      const pending: Promise<Res>[] = [];
      for (let wave = 0; wave < 4; wave++) {
        for (let i = 0; i < 8; i++) {
          pending.push(postCharge(i % 2 ? main.url : peer.url, tenant, key, chargeBody(customer)));
        }
        await sleep(150);
      }
      const answers = await Promise.all(pending);

      expect(answers.map((r) => r.status).filter((s) => s !== 201 && s !== 409)).toEqual([]);
      const originals = answers.filter(
        (r) => r.status === 201 && r.headers['idempotent-replayed'] === undefined,
      );
      expect(originals).toHaveLength(1);
      for (const res of answers) {
        if (res.status === 201 && res !== originals[0]) expectReplayOf(res, originals[0]);
        if (res.status === 409) expectInProgress(res, 60);
      }
      // The requests overlapped for real.
      expect(answers.filter((r) => r.status === 409).length).toBeGreaterThan(0);

      expectReplayOf(await postCharge(peer.url, tenant, key, chargeBody(customer)), originals[0]);
      expect(await listCharges(main.url, tenant, customer)).toEqual([
        { ...originals[0].body, amount_refunded: 0 },
      ]);
      expect(await authorizations(customer)).toHaveLength(1);
    });
  });

  describe('POST /webhooks/psp', () => {
    it('the same event delivered 20 times at once applies once: one {"duplicate": false}, the rest {"duplicate": true}', async () => {
      const [tenant, customer] = [newTenant(), newCustomer()];
      const created = await postCharge(main.url, tenant, newKey(), chargeBody(customer, 1000));
      expectFresh(created);
      const event = {
        id: `evt_${randomUUID()}`,
        type: 'refund',
        charge: created.body.id,
        amount: 250,
      };

      const deliveries = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          postWebhook(i % 2 ? main.url : peer.url, tenant, event),
        ),
      );
      for (const res of deliveries) {
        expect(res.status).toBe(200);
        expect(res.headers['content-type']).toMatch(JSON_TYPE);
      }
      const bodies = deliveries.map((r) => r.body as unknown);
      expect(bodies.filter((b) => JSON.stringify(b) === '{"duplicate":false}')).toHaveLength(1);
      expect(bodies.filter((b) => JSON.stringify(b) === '{"duplicate":true}')).toHaveLength(19);
      expect((await getCharge(main.url, tenant, created.body.id)).amount_refunded).toBe(250);

      // A new event id applies; the old one, delivered again later, still does not.
      const second = await postWebhook(peer.url, tenant, {
        ...event,
        id: `evt_${randomUUID()}`,
        amount: 100,
      });
      expect(second.status).toBe(200);
      expect(second.body).toEqual({ duplicate: false });
      const again = await postWebhook(main.url, tenant, event);
      expect(again.status).toBe(200);
      expect(again.body).toEqual({ duplicate: true });
      expect((await getCharge(peer.url, tenant, created.body.id)).amount_refunded).toBe(350);
    });

    it("a refund for an unknown charge (or another tenant's) answers 404 and records nothing", async () => {
      const [tenant, stranger, customer] = [newTenant(), newTenant(), newCustomer()];
      const created = await postCharge(main.url, tenant, newKey(), chargeBody(customer, 1000));
      expectFresh(created);
      const unknown = randomUUID();
      const event = { id: `evt_${randomUUID()}`, type: 'refund', charge: unknown, amount: 500 };

      for (let delivery = 0; delivery < 2; delivery++) {
        // A second delivery is 404 again, not a duplicate: the first recorded nothing.
        const res = await postWebhook(main.url, tenant, event);
        expect(res.status).toBe(404);
        expect(res.body).toEqual({ error: 'not_found', message: `no charge ${unknown}` });
      }
      const foreign = {
        id: `evt_${randomUUID()}`,
        type: 'refund',
        charge: created.body.id,
        amount: 500,
      };
      const res = await postWebhook(peer.url, stranger, foreign);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ error: 'not_found', message: `no charge ${created.body.id}` });
      expect((await getCharge(main.url, tenant, created.body.id)).amount_refunded).toBe(0);

      // The event ids were not recorded: delivered for the tenant's charge, they apply now.
      const applied = await postWebhook(main.url, tenant, { ...event, charge: created.body.id });
      expect(applied.status).toBe(200);
      expect(applied.body).toEqual({ duplicate: false });
      expect((await getCharge(main.url, tenant, created.body.id)).amount_refunded).toBe(500);
    });
  });

  describe('the database unreachable', () => {
    it('before the request: 503 with Retry-After, nothing executed; once it is back the same key charges once', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const warmUp = await postCharge(flakyDb.url, tenant, newKey(), chargeBody(newCustomer()));
      expectFresh(warmUp);
      const requests = psp.requestCount();
      await dbProxy.refuse();
      try {
        const down = await postCharge(flakyDb.url, tenant, key, chargeBody(customer));
        expectProblem(down, 503, 'store_unavailable');
        expect(down.headers['retry-after']).toBe('1');
        expect(psp.requestCount()).toBe(requests);
      } finally {
        await dbProxy.restore();
      }
      expect(await listCharges(main.url, tenant, customer)).toEqual([]);

      const back = await postCharge(flakyDb.url, tenant, key, chargeBody(customer));
      expectFresh(back);
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
      expect(await authorizations(customer)).toHaveLength(1);
      expectReplayOf(await postCharge(flakyDb.url, tenant, key, chargeBody(customer)), back);
    });

    it('a webhook delivered while it is unreachable: 503 with Retry-After, nothing recorded; delivered again it applies once', async () => {
      const [tenant, customer] = [newTenant(), newCustomer()];
      const created = await postCharge(main.url, tenant, newKey(), chargeBody(customer, 1000));
      expectFresh(created);
      const event = {
        id: `evt_${randomUUID()}`,
        type: 'refund',
        charge: created.body.id,
        amount: 300,
      };
      await dbProxy.refuse();
      let down: Res;
      try {
        down = await postWebhook(flakyDb.url, tenant, event);
      } finally {
        await dbProxy.restore();
      }
      expectProblem(down, 503, 'store_unavailable');
      expect(down.headers['retry-after']).toBe('1');
      expect((await getCharge(main.url, tenant, created.body.id)).amount_refunded).toBe(0);

      const again = await postWebhook(flakyDb.url, tenant, event);
      expect(again.status).toBe(200);
      expect(again.body).toEqual({ duplicate: false });
      const duplicate = await postWebhook(main.url, tenant, event);
      expect(duplicate.body).toEqual({ duplicate: true });
      expect((await getCharge(main.url, tenant, created.body.id)).amount_refunded).toBe(300);
    });

    it('lost while the PSP call runs: 503; once it is back the retry resumes: one charge, one authorization', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      psp.delayMs = 1000;
      const requests = psp.requestCount();
      const called = psp.nextRequest();
      const cut = postCharge(flakyDb.url, tenant, key, chargeBody(customer));
      await called; // the charge row is committed; the PSP call runs
      await dbProxy.refuse();
      let lost: Res;
      try {
        lost = await cut;
      } finally {
        await dbProxy.restore();
      }
      expectProblem(lost, 503, 'store_unavailable');
      expect(lost.headers['retry-after']).toBe('1');
      const pending = await listCharges(main.url, tenant, customer);
      expect(pending).toEqual([
        expect.objectContaining({ status: 'pending', psp_authorization: null }),
      ]);

      const { res: back } = await retryWhileInProgress(() =>
        postCharge(flakyDb.url, tenant, key, chargeBody(customer)),
      );
      expectFresh(back);
      expect(back.body).toMatchObject({ id: pending[0].id, status: 'succeeded' });
      expect(await listCharges(main.url, tenant, customer)).toHaveLength(1);
      expect(psp.requestCount() - requests).toBe(2);
      expect(await authorizations(customer)).toEqual([
        expect.objectContaining({ id: back.body.psp_authorization }),
      ]);
      expectReplayOf(await postCharge(peer.url, tenant, key, chargeBody(customer)), back);
    });
  });

  describe('retention', () => {
    it('a finished key is kept IDEMPOTENCY_RETENTION_MS; used again after that it is a new execution with a new PSP key', async () => {
      const [tenant, key, customer] = [newTenant(), newKey(), newCustomer()];
      const first = await postCharge(expiring.url, tenant, key, chargeBody(customer));
      const finishedAt = Date.now();
      expectFresh(first);
      expectReplayOf(await postCharge(expiring.url, tenant, key, chargeBody(customer)), first);

      await sleep(Math.max(0, finishedAt + SHORT_RETENTION_MS + 750 - Date.now()));
      const again = await postCharge(expiring.url, tenant, key, chargeBody(customer));
      expectFresh(again);
      expect(again.body.id).not.toBe(first.body.id);
      // The PSP authorized anew: it did not hand the old execution's answer to the new one.
      expect(again.body.psp_authorization).not.toBe(first.body.psp_authorization);
      const made = await authorizations(customer);
      expect(made.map((a) => a.id).sort()).toEqual(
        [first.body.psp_authorization, again.body.psp_authorization].sort(),
      );
      expect(await listCharges(expiring.url, tenant, customer)).toHaveLength(2);
      expectReplayOf(await postCharge(expiring.url, tenant, key, chargeBody(customer)), again);
    });
  });

  describe('shutdown', () => {
    // Last: it stops the short-lease instance, which no test after it uses.
    it('stops cleanly on SIGTERM (exit code 0)', async () => {
      expect(await stopGracefully(shortLease)).toEqual({ code: 0, signal: null });
    });
  });
});

describe('the standalone processes', () => {
  it('npm start with neither DATABASE_URL nor PSP_URL: embedded PostgreSQL, in-process fake PSP (PSP_DELAY_MS), Express by default', async () => {
    const app = await startStandaloneApp({ PSP_DELAY_MS: '300' });
    let stopped: Awaited<ReturnType<typeof stopGracefully>> | undefined;
    try {
      const key = `standalone-${Date.now()}`;
      const started = Date.now();
      const first = await postCharge(app.url, '1', key, chargeBody('cus_standalone', 2500));
      expect(Date.now() - started).toBeGreaterThanOrEqual(300 - 20);
      expectFresh(first);
      expect(first.body).toMatchObject({
        amount: 2500,
        customer: 'cus_standalone',
        status: 'succeeded',
      });
      expect(first.body.psp_authorization).toEqual(expect.any(String));
      expectReplayOf(
        await postCharge(app.url, '1', key, chargeBody('cus_standalone', 2500)),
        first,
      );
      const declined = await postCharge(app.url, '1', `${key}-decline`, chargeBody('cus_decline'));
      expectFresh(declined, 402);
      expect(declined.body.error).toBe('card_declined');
      expect(await listCharges(app.url, '1', 'cus_standalone')).toEqual([
        { ...first.body, amount_refunded: 0 },
      ]);
      const unauthorized = await getPath(app.url, '/charges?customer=cus_standalone', undefined);
      expect(unauthorized.status).toBe(401);
      expect(unauthorized.headers['x-powered-by']).toBe('Express');
    } finally {
      stopped = await stopGracefully(app);
    }
    // SIGTERM stops the app and its embedded PostgreSQL in order.
    expect(stopped).toEqual({ code: 0, signal: null });
  });

  it('npm run psp: the fake PSP alone on PSP_PORT, waits PSP_DELAY_MS, one authorization per key', async () => {
    const psp = await startStandalonePsp(200);
    try {
      const authorize = (key: string | undefined, customer: string) => {
        let req = request(psp.url).post('/v1/authorizations');
        if (key !== undefined) req = req.set('Idempotency-Key', key);
        return req.send({ amount: 10, currency: 'eur', customer }).then((res) => res);
      };
      const started = Date.now();
      const [a, b] = await Promise.all([authorize('k-1', 'cus_p'), authorize('k-1', 'cus_p')]);
      expect(Date.now() - started).toBeGreaterThanOrEqual(200 - 20);
      expect(a.status).toBe(201);
      expect(a.body).toEqual({
        id: expect.any(String),
        amount: 10,
        currency: 'eur',
        customer: 'cus_p',
      });
      expect(b.status).toBe(201);
      expect(b.body).toEqual(a.body);
      const later = await authorize('k-1', 'cus_p');
      expect(later.body).toEqual(a.body);
      const other = await authorize('k-2', 'cus_p');
      expect(other.status).toBe(201);
      expect(other.body.id).not.toBe(a.body.id);
      expect((await authorize(undefined, 'cus_p')).status).toBe(400);
      expect((await authorize('k-3', 'cus_decline')).status).toBe(402);
      expect((await authorize('k-4', 'cus_psp_error')).status).toBe(500);
      const listed = await request(psp.url).get('/v1/authorizations').query({ customer: 'cus_p' });
      expect(listed.status).toBe(200);
      expect(listed.body).toEqual([a.body, other.body]);
    } finally {
      expect(await stopGracefully(psp)).toEqual({ code: 0, signal: null });
    }
  });
});
