import { Client } from 'pg';
import request from 'supertest';
import { type Authorization, startFakePsp, type FakePsp } from '../../sample-app/psp/fake-psp.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { startPgBouncer, type TestPgBouncer } from '../support/pgbouncer.js';
import {
  expectFresh,
  expectInProgress,
  expectProblem,
  expectReplayOf,
  getPath,
  KEY_MISMATCH,
  MIB,
  padTo,
  type Res,
  retryWhileInProgress,
  sleep,
} from '../support/sample-app-http.js';
import {
  type SampleAppAdapter,
  type SampleAppSettings,
  startSampleApp,
  viaPort,
  type WorkerProcess,
} from '../support/sample-app-process.js';
import { TcpProxy } from '../support/tcp-proxy.js';

/**
 * The sample app behind a real PgBouncer (1.18 here) in transaction mode, as a black box: with
 * `DATABASE_POOLER=transaction` the contract's rows hold through it, each kind of the library's
 * statements (claim, replay, phases, release, takeover, the fenced commit, a consumer's
 * message) included; with the default (`none`) it works all the same, never failing request by
 * request; any other value refuses to start. Two server connections serve every instance, in
 * turn, so consecutive transactions of one app connection land on different server sessions.
 * `TEST_POOLER=pgbouncer` runs every other sample-app suite behind one too.
 */

const ADAPTERS: SampleAppAdapter[] = ['express', 'fastify'];
const SHORT_LEASE_MS = 1500;
/** `TRANSFER_DELAY_MS` of the instance whose transfer meets a second request. */
const SLOW_TRANSFER_MS = 1000;
/** How long an instance may take to start: this machine is shared, and several start at once. */
const START_MS = 90_000;

const charge = (customer: string, amount = 100) => ({ amount, currency: 'eur', customer });
const transfer = (from: string, amount = 100) => ({ amount, from, to: 'acct_to' });

function post(url: string, path: string, tenant: string, key: string | undefined, body: unknown) {
  let req = request(url).post(path).set('X-Tenant-Id', tenant);
  if (key !== undefined) req = req.set('Idempotency-Key', key);
  if (typeof body === 'string') req = req.set('Content-Type', 'application/json');
  return req.send(body as object).then((res) => res);
}

/** Resolves once `probe` is true (a gate on an event, not a fixed sleep). */
async function until(probe: () => boolean | Promise<boolean>, what: string, maxMs = 15_000) {
  const deadline = Date.now() + maxMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`${what}: not after ${maxMs} ms`);
    await sleep(25);
  }
}

let database: TestDatabase;
let bouncer: TestPgBouncer;
let psp: FakePsp;
let db: Client;

beforeAll(async () => {
  database = await createTestDatabase('sample_app_pooler');
  bouncer = await startPgBouncer({ poolMode: 'transaction', poolSize: 2 });
  psp = await startFakePsp();
  db = new Client({ connectionString: database.url });
  await db.connect();
});

afterAll(async () => {
  await db?.end();
  await psp?.close();
  await bouncer?.stop();
  await database?.drop();
});

const run = Date.now().toString(36);
let seq = 0;
const next = (what: string) => `${what}_${run}_${++seq}`;
const newTenant = () => String(5000 + ++seq);

const transferRows = async (tenant: string, from: string) =>
  (
    await db.query<{ id: string }>(
      'SELECT id FROM transfers WHERE tenant_id = $1 AND from_customer = $2',
      [tenant, from],
    )
  ).rows;

const claimed = async (tenant: string, key: string) =>
  (
    await db.query('SELECT 1 FROM idempotency_keys WHERE tenant_id = $1 AND key = $2', [
      tenant,
      key,
    ])
  ).rows.length > 0;

const authorizations = async (customer: string): Promise<Authorization[]> =>
  (await request(psp.url).get('/v1/authorizations').query({ customer })).body as Authorization[];

describe('DATABASE_POOLER unset (none) behind PgBouncer in transaction mode', () => {
  const spawned: WorkerProcess[] = [];
  afterAll(async () => Promise.all(spawned.splice(0).map((app) => app.kill('SIGKILL'))));

  it.each(ADAPTERS)(
    'on %s: 40 concurrent first requests are each answered 201 and run once; the log says once that it adapted',
    async (adapter) => {
      const app = await startSampleApp(
        { adapter, databaseUrl: bouncer.url(database.name), pspUrl: psp.url },
        START_MS,
      );
      spawned.push(app);
      const tenant = newTenant();
      const sends = Array.from({ length: 40 }, (_, i) =>
        i % 2
          ? { path: '/charges', body: charge(next('cus'), 100 + i) }
          : { path: '/transfers', body: transfer(next('acct'), 100 + i) },
      );
      const keys = sends.map(() => next('key'));
      const first = await Promise.all(
        sends.map(({ path, body }, i) => post(app.url, path, tenant, keys[i], body)),
      );
      expect(first.map((r) => `${r.status} ${r.status === 201 ? '' : r.text}`)).toEqual(
        sends.map(() => '201 '),
      );
      const again = await Promise.all(
        sends.map(({ path, body }, i) => post(app.url, path, tenant, keys[i], body)),
      );
      expect(again.map((r) => r.headers['idempotent-replayed'])).toEqual(sends.map(() => 'true'));
      expect(again.map((r) => r.text)).toEqual(first.map((r) => r.text));
      for (const { path, body } of sends) {
        if (path === '/transfers') {
          expect(await transferRows(tenant, (body as { from: string }).from)).toHaveLength(1);
        } else {
          expect(await authorizations((body as { customer: string }).customer)).toHaveLength(1);
        }
      }
      const said = app.output().match(/through a connection pooler/g) ?? [];
      expect(said).toHaveLength(1);
      expect(app.output()).not.toMatch(/store_misconfigured|SQLSTATE (26000|42P05)/);
    },
    START_MS + 30_000,
  );

  it(
    'a DATABASE_POOLER other than transaction or none: the app refuses to start, naming it',
    async () => {
      const started = startSampleApp(
        {
          adapter: 'express',
          databaseUrl: bouncer.url(database.name),
          pspUrl: psp.url,
          pooler: 'session',
        },
        START_MS,
      );
      await expect(started).rejects.toThrow(
        /exited with 1:[\s\S]*configuration: DATABASE_POOLER must be "transaction" or "none", got "session"/,
      );
    },
    START_MS,
  );
});

describe.each(ADAPTERS)('DATABASE_POOLER=transaction behind PgBouncer, on %s', (adapter) => {
  /** Reaches the PSP through `pspProxy`, PSP timeout 2.5 s. */
  let main: WorkerProcess;
  /** Lease 1.5 s, no heartbeat, transfers wait 1 s: it outlives its lease, then is killed. */
  let slow: WorkerProcess;
  /** Reaches PgBouncer through `dbProxy`, lease 1.5 s. */
  let flaky: WorkerProcess;
  let pspProxy: TcpProxy;
  let dbProxy: TcpProxy;

  beforeAll(async () => {
    pspProxy = new TcpProxy('127.0.0.1', psp.port);
    await pspProxy.start();
    dbProxy = new TcpProxy('127.0.0.1', bouncer.port);
    await dbProxy.start();
    const url = bouncer.url(database.name);
    const start = (settings: Partial<SampleAppSettings>) =>
      startSampleApp(
        {
          adapter,
          databaseUrl: url,
          pspUrl: psp.url,
          pooler: 'transaction',
          ...settings,
        },
        START_MS,
      );
    // All three at once: they migrate once, under the app's lock, through the pooler.
    const all = await Promise.allSettled([
      start({ pspUrl: `http://127.0.0.1:${pspProxy.port}`, pspTimeoutMs: 2500 }),
      start({ leaseMs: SHORT_LEASE_MS, heartbeat: false, transferDelayMs: SLOW_TRANSFER_MS }),
      start({ leaseMs: SHORT_LEASE_MS, databaseUrl: viaPort(url, dbProxy.port) }),
    ]);
    const started = all.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    const failed = all.find((o): o is PromiseRejectedResult => o.status === 'rejected');
    if (failed) {
      await Promise.all(started.map((app) => app.kill('SIGKILL')));
      throw failed.reason;
    }
    [main, slow, flaky] = started;
  }, START_MS + 10_000);

  afterEach(() => {
    psp.delayMs = 0;
  });

  afterAll(async () => {
    await Promise.all([main, slow, flaky].filter(Boolean).map((app) => app.kill('SIGKILL')));
    await pspProxy?.stop();
    await dbProxy?.stop();
  });

  it('charges: 201, then the byte-identical replay from another instance; 402 and 502 stored and replayed', async () => {
    const tenant = newTenant();
    for (const [customer, status] of [
      [next('cus'), 201],
      ['cus_decline', 402],
      ['cus_psp_error', 502],
    ] as const) {
      const key = next('key');
      const first = await post(main.url, '/charges', tenant, key, charge(customer));
      expectFresh(first, status);
      expectReplayOf(await post(flaky.url, '/charges', tenant, key, charge(customer)), first);
      expectReplayOf(await post(main.url, '/charges', tenant, key, charge(customer)), first);
    }
    // The key is scoped by tenant: another tenant's same key is a new charge.
    const key = next('key');
    const customer = next('cus');
    expectFresh(await post(main.url, '/charges', tenant, key, charge(customer)));
    expectFresh(await post(main.url, '/charges', newTenant(), key, charge(customer)));
  });

  it('422 for a key reused with another body; 400 and 413 store nothing, so the key then works', async () => {
    const tenant = newTenant();
    const key = next('key');
    const customer = next('cus');
    expect(
      (await post(main.url, '/charges', tenant, key, { amount: 0, currency: 'eur', customer }))
        .status,
    ).toBe(400);
    expect((await post(main.url, '/charges', tenant, key, '{"amount": 1,')).status).toBe(400);
    expect(
      (
        await post(
          main.url,
          '/charges',
          tenant,
          key,
          padTo(JSON.stringify(charge(customer)), MIB + 1),
        )
      ).status,
    ).toBe(413);
    expect((await post(main.url, '/charges', tenant, undefined, charge(customer))).status).toBe(
      400,
    );
    const first = await post(main.url, '/charges', tenant, key, charge(customer));
    expectFresh(first);
    const other = await post(flaky.url, '/charges', tenant, key, charge(customer, 101));
    expect(other.status).toBe(422);
    expect(other.body).toEqual(KEY_MISMATCH);
  });

  it('409 with Retry-After while another request holds the lease, then the one answer', async () => {
    const tenant = newTenant();
    const key = next('key');
    const customer = next('cus');
    psp.delayMs = 1500;
    const before = psp.requestCount();
    const held = post(main.url, '/charges', tenant, key, charge(customer));
    await until(() => psp.requestCount() > before, 'the PSP called');
    expectInProgress(await post(flaky.url, '/charges', tenant, key, charge(customer)), 60);
    const first = await held;
    expectFresh(first);
    expectReplayOf(await post(flaky.url, '/charges', tenant, key, charge(customer)), first);
    expect(await authorizations(customer)).toHaveLength(1);
  });

  it('the PSP unreachable: 503 with Retry-After, the lease released; once back, a retry resumes and charges once', async () => {
    const tenant = newTenant();
    const key = next('key');
    const customer = next('cus');
    await pspProxy.refuse();
    let down: Res;
    try {
      down = await post(main.url, '/charges', tenant, key, charge(customer));
      expectProblem(down, 503, 'retry_later');
      expect(down.headers['retry-after']).toBe('1');
      // Released: a retry runs at once (another 503), not a 409.
      expectProblem(
        await post(main.url, '/charges', tenant, key, charge(customer)),
        503,
        'retry_later',
      );
    } finally {
      await pspProxy.restore();
    }
    const back = await post(main.url, '/charges', tenant, key, charge(customer));
    expectFresh(back);
    const charges = await getPath(main.url, `/charges?customer=${customer}`, tenant);
    expect(charges.body).toEqual([
      expect.objectContaining({ id: back.body.id, status: 'succeeded' }),
    ]);
  });

  it('transfers: 409 while another request holds the key, then 201 once, replayed, listed', async () => {
    const tenant = newTenant();
    const from = next('acct');
    const key = next('key');
    const first = post(slow.url, '/transfers', tenant, key, transfer(from));
    await until(() => claimed(tenant, key), 'the key claimed');
    expectInProgress(await post(main.url, '/transfers', tenant, key, transfer(from)), 2);
    const answer = await first;
    expectFresh(answer);
    expect(await transferRows(tenant, from)).toEqual([{ id: answer.body.id }]);
    expectReplayOf(await post(flaky.url, '/transfers', tenant, key, transfer(from)), answer);
    const listed = await getPath(main.url, `/transfers?from=${from}`, tenant);
    expect(listed.body).toEqual([answer.body]);
  });

  it("a worker past its lease is fenced: 409 lease_lost; the new owner's 201 is stored, the PSP charged once", async () => {
    const tenant = newTenant();
    const key = next('key');
    const customer = next('cus');
    psp.delayMs = 4000;
    const called = psp.nextRequest();
    const stalled = post(slow.url, '/charges', tenant, key, charge(customer));
    await called; // claimed (lease 1.5 s, no heartbeat), waiting ~4 s on the PSP
    await sleep(SHORT_LEASE_MS + 300);
    const taker = await post(flaky.url, '/charges', tenant, key, charge(customer));
    expectFresh(taker);
    expectProblem(await stalled, 409, 'lease_lost');
    expectReplayOf(await post(main.url, '/charges', tenant, key, charge(customer)), taker);
    expect(await authorizations(customer)).toEqual([
      expect.objectContaining({ id: taker.body.psp_authorization }),
    ]);
  });

  it('a worker killed mid-charge: its key is taken over after its lease, the PSP asked with the same key, charged once', async () => {
    const tenant = newTenant();
    const key = next('key');
    const customer = next('cus');
    psp.delayMs = 2000; // the victim waits on the PSP, its first phase committed
    const called = psp.nextRequest();
    void post(slow.url, '/charges', tenant, key, charge(customer)).catch(() => undefined);
    await called;
    await slow.kill('SIGKILL');
    const { res, conflicts } = await retryWhileInProgress(() =>
      post(flaky.url, '/charges', tenant, key, charge(customer)),
    );
    expect(conflicts.length).toBeGreaterThan(0);
    expectFresh(res);
    expect(await authorizations(customer)).toHaveLength(1);
    const listed = await getPath(main.url, `/charges?customer=${customer}`, tenant);
    expect(listed.body).toEqual([
      expect.objectContaining({ id: res.body.id, status: 'succeeded' }),
    ]);
  });

  it('webhooks: a new event 200 duplicate false, again duplicate true, an unknown charge 404', async () => {
    const tenant = newTenant();
    const customer = next('cus');
    const paid = await post(main.url, '/charges', tenant, next('key'), charge(customer, 500));
    expectFresh(paid);
    const event = { id: next('evt'), type: 'refund', charge: paid.body.id, amount: 200 };
    const sent = await Promise.all([
      post(main.url, '/webhooks/psp', tenant, undefined, event),
      post(flaky.url, '/webhooks/psp', tenant, undefined, event),
    ]);
    expect(sent.map((r) => [r.status, r.body.duplicate]).sort()).toEqual([
      [200, false],
      [200, true],
    ]);
    const unknown = { ...event, id: next('evt'), charge: '00000000-0000-4000-8000-000000000000' };
    expect((await post(main.url, '/webhooks/psp', tenant, undefined, unknown)).status).toBe(404);
    const view = await getPath(main.url, `/charges/${paid.body.id}`, tenant);
    expect(view.body.amount_refunded).toBe(200);
  });

  it('the database unreachable: 503 with Retry-After; once back, 201 and replays', async () => {
    const tenant = newTenant();
    const key = next('key');
    const from = next('acct');
    expectFresh(await post(flaky.url, '/transfers', tenant, next('key'), transfer(next('acct'))));
    await dbProxy.refuse();
    try {
      const down = await post(flaky.url, '/transfers', tenant, key, transfer(from));
      expectProblem(down, 503, 'store_unavailable');
      expect(down.headers['retry-after']).toMatch(/^\d+$/);
    } finally {
      await dbProxy.restore();
    }
    const { res: back } = await retryWhileInProgress(() =>
      post(flaky.url, '/transfers', tenant, key, transfer(from)),
    );
    expectFresh(back);
    expectReplayOf(await post(main.url, '/transfers', tenant, key, transfer(from)), back);
    expect(await transferRows(tenant, from)).toHaveLength(1);
  });
});
