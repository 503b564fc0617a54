import { type INestApplication } from '@nestjs/common';
import { Client } from 'pg';
import request from 'supertest';
import { canonicalizeJsonText, computeFingerprint } from '../lib/index.js';
import { startFakePsp, type FakePsp } from '../sample-app/psp/fake-psp.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createPhaseApp, PHASE_APP_DDL } from './support/phase-app.js';
import { startWorker, type WorkerProcess } from './support/worker-process.js';

const LEASE_MS = 1500;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Atomic phases against real PostgreSQL, a real slow PSP (a fake that honours idempotency
 * keys) and, for crashes, real worker processes killed with SIGKILL.
 */
describe('atomic phases, takeover and fencing', () => {
  let database: TestDatabase;
  let db: Client;
  let psp: FakePsp;
  let appA: INestApplication;
  let appB: INestApplication;
  const workers: WorkerProcess[] = [];
  let n = 0;
  const nextKey = () => `phase-${++n}-${Date.now()}`;

  beforeAll(async () => {
    database = await createTestDatabase('phases');
    db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(PHASE_APP_DDL);
    psp = await startFakePsp();
    const settings = { databaseUrl: database.url, pspUrl: psp.url, leaseMs: LEASE_MS };
    appA = await createPhaseApp({ ...settings, worker: 'A' });
    appB = await createPhaseApp({ ...settings, worker: 'B', adapter: 'fastify' });
  });
  afterEach(async () => {
    psp.delayMs = 0;
    await Promise.all(workers.splice(0).map((w) => w.kill()));
  });
  afterAll(async () => {
    await appA?.close();
    await appB?.close();
    await psp?.close();
    await db?.end();
    await database?.drop();
  });

  const pay = (
    target: INestApplication | string,
    key: string,
    customer: string,
    path = '/payments',
  ) =>
    request(typeof target === 'string' ? target : target.getHttpServer())
      .post(path)
      .set('Idempotency-Key', key)
      .send({ amount: 1000, customer, key });

  /** Retries like a client would until the key is no longer in progress. */
  async function retryUntilDone(target: INestApplication | string, key: string, customer: string) {
    for (let attempt = 0; attempt < 60; attempt++) {
      const res = await pay(target, key, customer);
      if (res.status !== 409) return res;
      await sleep(250);
    }
    throw new Error('still 409 after 15 s');
  }

  const phaseRuns = async (key: string) => {
    const { rows } = await db.query<{ phase: string; worker: string }>(
      'SELECT phase, worker FROM phase_runs WHERE payment_key = $1 ORDER BY id',
      [key],
    );
    return rows;
  };
  const payments = async (customer: string) =>
    (await db.query('SELECT * FROM payments WHERE customer = $1', [customer])).rows;
  const keyRow = async (key: string) =>
    (await db.query('SELECT * FROM idempotency_keys WHERE key = $1', [key])).rows[0];
  const worker = async (name: string, extra: Record<string, string> = {}) => {
    const started = await startWorker('test/support/phase-worker.js', {
      DATABASE_URL: database.url,
      PSP_URL: psp.url,
      LEASE_MS: String(LEASE_MS),
      WORKER: name,
      ...extra,
    });
    workers.push(started);
    return started;
  };

  it('runs every phase once and replays the stored final response', async () => {
    const key = nextKey();
    const first = await pay(appA, key, 'cus_once');
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ status: 'succeeded', finishedBy: 'A' });
    expect(first.body.derivedKey).toBe(`${(await keyRow(key)).claim_id}:psp_authorized`);
    const again = await pay(appB, key, 'cus_once');
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.text).toBe(first.text);
    expect((await phaseRuns(key)).map((r) => r.phase)).toEqual([
      'order_created',
      'psp_authorized',
      'receipt_prepared',
      'finish',
    ]);
    expect(await keyRow(key)).toMatchObject({
      state: 'done',
      recovery_point: 'finished',
      response_code: 201,
    });
  });

  // A phase whose work caught a passing failure (a lock wait timed out) and went on: the
  // database had aborted its transaction. What the request met is the lock timeout: a 503
  // database_transient with nothing stored, and the retry, once the lock is free, runs.
  // Before, the phase's "transaction aborted" was answered (and stored) as the handler's 500.
  it.each(['return', 'query'] as const)(
    'a phase that caught a lock timeout and went on (then %s): 503, nothing stored, the retry runs',
    async (then) => {
      const key = nextKey();
      const customer = `cus_caught_${then}`;
      const send = () =>
        request(appA.getHttpServer())
          .post('/payments-caught-lock-timeout')
          .set('Idempotency-Key', key)
          .send({ customer, then });
      const holder = new Client({ connectionString: database.url });
      await holder.connect();
      try {
        await holder.query('BEGIN');
        await holder.query('SELECT id FROM phase_locks WHERE id = 1 FOR UPDATE');
        const first = await send();
        expect({ status: first.status, code: first.body.code }).toEqual({
          status: 503,
          code: 'database_transient',
        });
        expect(first.headers['retry-after']).toBeDefined();
        expect(await keyRow(key)).toMatchObject({ state: 'started', response_code: null });
        await holder.query('COMMIT');
      } finally {
        await holder.end();
      }
      const retry = await send();
      expect(retry.status).toBe(201);
      expect(await payments(customer)).toHaveLength(then === 'query' ? 2 : 1);
    },
  );

  it('stores a non-default status given by respond() with the last phase, and replays it', async () => {
    const key = nextKey();
    const first = await pay(appA, key, 'cus_decline');
    expect(first.status).toBe(402);
    expect(first.body).toMatchObject({ error: 'card_declined' });
    const again = await pay(appA, key, 'cus_decline');
    expect(again.status).toBe(402);
    expect(again.text).toBe(first.text);
    expect(again.headers['idempotent-replayed']).toBe('true');
  });

  it('runs phases without a key on a route whose key is optional, respond() status kept', async () => {
    const label = nextKey();
    const send = () =>
      request(appA.getHttpServer())
        .post('/payments-key-optional')
        .send({ amount: 1000, customer: 'cus_decline', key: label });
    const first = await send();
    const second = await send();
    expect(first.status).toBe(402);
    expect(second.status).toBe(402);
    expect(second.headers['idempotent-replayed']).toBeUndefined();
    // Nothing was claimed, and each request ran every phase on its own.
    expect((await db.query('SELECT 1 FROM idempotency_keys WHERE key = $1', [label])).rows).toEqual(
      [],
    );
    expect((await phaseRuns(label)).filter((r) => r.phase === 'psp_authorized')).toHaveLength(2);
    expect(second.body.paymentId).not.toBe(first.body.paymentId);
  });

  /**
   * A key left at each recovery point by a worker that died (its lease expired): the next
   * request takes it over and runs exactly the phases after that point.
   */
  it.each([
    ['start', [], ['order_created', 'psp_authorized', 'receipt_prepared', 'finish']],
    ['order_created', ['order_created'], ['psp_authorized', 'receipt_prepared', 'finish']],
    ['psp_authorized', ['order_created', 'psp_authorized'], ['receipt_prepared', 'finish']],
    ['receipt_prepared', ['order_created', 'psp_authorized', 'receipt_prepared'], ['finish']],
  ])('resumes a key seeded at recovery point %s', async (point, done, expectedRuns) => {
    const key = nextKey();
    const customer = `cus_seed_${point}`;
    const results: Record<string, unknown> = {};
    let paymentId: number | undefined;
    if (done.includes('order_created')) {
      const rows = await db.query<{ id: number }>(
        `INSERT INTO payments (customer, amount, status, worker) VALUES ($1, 1000, 'pending', 'dead')
         RETURNING id`,
        [customer],
      );
      paymentId = rows.rows[0].id;
      results.order_created = { paymentId };
    }
    if (done.includes('psp_authorized')) {
      results.psp_authorized = { authorizationId: 'auth_seeded', derivedKey: 'seeded' };
    }
    if (done.includes('receipt_prepared')) results.receipt_prepared = null;
    // The row a dead worker left: the request's fingerprint, an expired lease, its phases.
    const fingerprint = computeFingerprint({
      method: 'POST',
      path: '/payments',
      headers: [],
      body: canonicalizeJsonText(JSON.stringify({ amount: 1000, customer, key })),
    });
    await db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until, recovery_point, phase_results)
       VALUES (0, $1, $2, now() - interval '1 second', $3, $4)`,
      [key, fingerprint, point, JSON.stringify(results)],
    );
    const requestsBefore = psp.requestCount();

    const res = await pay(appA, key, customer);
    expect(res.status).toBe(201);
    expect((await phaseRuns(key)).map((r) => r.phase)).toEqual(expectedRuns);
    if (paymentId !== undefined) expect(res.body.paymentId).toBe(paymentId);
    if (done.includes('psp_authorized')) {
      expect(res.body.authorizationId).toBe('auth_seeded');
      expect(psp.requestCount()).toBe(requestsBefore);
    } else {
      expect(psp.requestCount()).toBe(requestsBefore + 1);
    }
    expect(await keyRow(key)).toMatchObject({ state: 'done', lock_version: '1' });
  });

  it('crash: a SIGKILLed worker waiting on the PSP is taken over by another process', async () => {
    const key = nextKey();
    const customer = 'cus_crash';
    const [w1, w2] = await Promise.all([worker('W1'), worker('W2')]);
    psp.delayMs = 2000;
    const called = psp.nextRequest();
    const doomed = pay(w1.url, key, customer).then(
      () => 'answered',
      () => 'connection lost',
    );
    await called; // W1 committed phase one and now waits on the PSP
    await w1.kill('SIGKILL');
    expect(await doomed).toBe('connection lost');
    expect(await keyRow(key)).toMatchObject({ state: 'started', recovery_point: 'order_created' });

    const final = await retryUntilDone(w2.url, key, customer);
    expect(final.status).toBe(201);
    expect(final.body.finishedBy).toBe('W2');
    // One local charge, one PSP authorization, although the PSP was called twice.
    expect(await payments(customer)).toHaveLength(1);
    expect(psp.authorizations().filter((a) => a.customer === customer)).toHaveLength(1);
    expect(psp.requestCount()).toBeGreaterThanOrEqual(2);
    expect((await phaseRuns(key)).filter((r) => r.phase === 'order_created')).toHaveLength(1);
    const replay = await pay(w2.url, key, customer);
    expect(replay.text).toBe(final.text);
    expect(replay.headers['idempotent-replayed']).toBe('true');
  });

  it('crash between the PSP’s answer and its record: the takeover calls again with the same key and records once', async () => {
    const key = nextKey();
    const customer = 'cus_unrecorded';
    const w1 = await worker('W1', { RECORD_DELAY_MS: '60000' });
    const before = psp.requestCount();
    const doomed = pay(w1.url, key, customer).catch(() => undefined);
    for (let i = 0; i < 100 && psp.authorizations().every((a) => a.customer !== customer); i++) {
      await sleep(50);
    }
    await sleep(100); // the PSP answered W1; its record is waiting
    await w1.kill('SIGKILL');
    await doomed;
    expect(await keyRow(key)).toMatchObject({ state: 'started', recovery_point: 'order_created' });

    const final = await retryUntilDone(appB, key, customer);
    expect(final.status).toBe(201);
    expect(psp.requestCount() - before).toBe(2); // called again, with the same derived key
    expect(psp.authorizations().filter((a) => a.customer === customer)).toHaveLength(1);
    const [payment] = await payments(customer);
    expect(payment.authorization_id).toBe(final.body.authorizationId);
    expect((await phaseRuns(key)).filter((r) => r.phase === 'psp_authorized')).toEqual([
      { phase: 'psp_authorized', worker: 'B' },
    ]);
  });

  it('20 concurrent requests waiting on a slow PSP hold no connection in a transaction', async () => {
    psp.delayMs = 3000;
    const before = psp.requestCount();
    // No PSP answer comes before this: sampling stops short of it, so that the phases that
    // record the answers (in transactions, rightly) are never what is seen, however loaded
    // the machine is.
    const firstAnswer = Date.now() + psp.delayMs;
    const keys = Array.from({ length: 20 }, () => nextKey());
    const answers = Promise.all(keys.map((key, i) => pay(appA, key, `cus_many_${i}`)));
    for (let i = 0; i < 200 && psp.requestCount() - before < 20; i++) await sleep(10);
    expect(psp.requestCount() - before).toBe(20); // all 20 are waiting on the PSP now
    let peak = 0;
    for (let i = 0; i < 10 && Date.now() < firstAnswer - 500; i++) {
      const { rows } = await db.query<{ n: string }>(
        `SELECT count(*) AS n FROM pg_stat_activity
         WHERE datname = $1 AND pid <> pg_backend_pid() AND xact_start IS NOT NULL`,
        [database.name],
      );
      peak = Math.max(peak, Number(rows[0].n));
      await sleep(20);
    }
    expect(peak).toBe(0);
    expect((await answers).map((res) => res.status)).toEqual(Array(20).fill(201));
  });

  it('resumption: killed after phase two committed, the takeover skips phases one and two', async () => {
    const key = nextKey();
    const customer = 'cus_resume';
    const w1 = await worker('W1', { PHASE_THREE_DELAY_MS: '60000' });
    const doomed = pay(w1.url, key, customer).catch(() => undefined);
    for (let i = 0; i < 100 && (await keyRow(key))?.recovery_point !== 'psp_authorized'; i++) {
      await sleep(50);
    }
    expect((await keyRow(key)).recovery_point).toBe('psp_authorized');
    await w1.kill('SIGKILL');
    await doomed;
    const requestsBefore = psp.requestCount();

    const final = await retryUntilDone(appB, key, customer);
    expect(final.status).toBe(201);
    expect(final.body.finishedBy).toBe('B');
    // The takeover got phase one's and two's results back instead of running them.
    const [payment] = await payments(customer);
    expect(final.body.paymentId).toBe(payment.id);
    expect(final.body.authorizationId).toBe(payment.authorization_id);
    expect(psp.requestCount()).toBe(requestsBefore);
    expect(await phaseRuns(key)).toEqual([
      { phase: 'order_created', worker: 'W1' },
      { phase: 'psp_authorized', worker: 'W1' },
      { phase: 'receipt_prepared', worker: 'B' },
      { phase: 'finish', worker: 'B' },
    ]);
    expect((await keyRow(key)).lock_version).toBe('1');
  });

  it('fencing: a stalled worker whose lease was taken over commits nothing and gets 409', async () => {
    const key = nextKey();
    const customer = 'cus_fenced';
    psp.delayMs = 3000;
    const called = psp.nextRequest();
    const stalled = pay(appA, key, customer);
    const stalledDone = stalled.then((r) => r);
    await called;
    await sleep(LEASE_MS + 300); // A still waits on the PSP; its lease has run out

    const taker = await pay(appB, key, customer);
    expect(taker.status).toBe(201);
    expect(taker.body.finishedBy).toBe('B');
    const late = await stalledDone;
    expect(late.status).toBe(409);
    expect(late.body.code).toBe('lease_lost');
    expect(late.headers['retry-after']).toBeDefined();

    // A's phase two (its row and the recorded run) was rolled back: only B's commits remain.
    expect(await phaseRuns(key)).toEqual([
      { phase: 'order_created', worker: 'A' },
      { phase: 'psp_authorized', worker: 'B' },
      { phase: 'receipt_prepared', worker: 'B' },
      { phase: 'finish', worker: 'B' },
    ]);
    expect(await payments(customer)).toHaveLength(1);
    expect(psp.authorizations().filter((a) => a.customer === customer)).toHaveLength(1);
    const replay = await pay(appA, key, customer);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.text).toBe(taker.text);
  });

  it('heartbeat: a slow but live worker keeps its lease, so nobody takes it over', async () => {
    const key = nextKey();
    const customer = 'cus_heartbeat';
    psp.delayMs = 3000;
    const called = psp.nextRequest();
    const slow = pay(appA, key, customer, '/payments-with-heartbeat').then((r) => r);
    await called;
    await sleep(LEASE_MS + 300);
    const other = await pay(appB, key, customer, '/payments-with-heartbeat');
    expect(other.status).toBe(409);
    expect(other.body.code).toBe('key_in_progress');
    const done = await slow;
    expect(done.status).toBe(201);
    expect(done.body.finishedBy).toBe('A');
    expect((await keyRow(key)).lock_version).toBe('0');
  });

  it('concurrent takeovers of one expired key: exactly one worker wins', async () => {
    const key = nextKey();
    const customer = 'cus_stampede';
    const w1 = await worker('W1', { PHASE_THREE_DELAY_MS: '60000' });
    const doomed = pay(w1.url, key, customer).catch(() => undefined);
    for (let i = 0; i < 100 && (await keyRow(key))?.recovery_point !== 'psp_authorized'; i++) {
      await sleep(50);
    }
    await w1.kill('SIGKILL');
    await doomed;
    await sleep(LEASE_MS + 200);

    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => pay(i % 2 ? appA : appB, key, customer)),
    );
    const winners = answers.filter((r) => r.status === 201 && !r.headers['idempotent-replayed']);
    expect(winners).toHaveLength(1);
    for (const r of answers) {
      expect([201, 409]).toContain(r.status);
      if (r.status === 201) expect(r.text).toBe(winners[0].text);
    }
    expect((await keyRow(key)).lock_version).toBe('1');
    expect((await phaseRuns(key)).map((r) => r.phase)).toEqual([
      'order_created',
      'psp_authorized',
      'receipt_prepared',
      'finish',
    ]);
  });
});
