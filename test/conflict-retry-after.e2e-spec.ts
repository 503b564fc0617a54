import { type AddressInfo } from 'node:net';
import request from 'supertest';
import { idempotentFetch, MemoryOperationStore } from '../lib/client/index.js';
import { type Scenario, startScenario } from './support/scenario.js';
import { ADAPTERS } from './support/test-app.js';

/**
 * A key in progress answers its duplicate 409 with a `Retry-After` that says when the work is
 * likely done, not when the lease ends: a 2 s request under a 60 s lease (a route that set
 * its lease long, as the design's default was) must not send its duplicates away for a
 * minute, nor the library's own client, which obeys the header.
 */
const HANDLER_MS = 2000;
const LEASE_MS = 60_000;

describe.each(ADAPTERS)('the 409 Retry-After on %s', (adapter) => {
  let scenario: Scenario;
  let url: string;
  let n = 0;
  const key = (label: string) => `${label}-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    scenario = await startScenario('conflict_retry_after', adapter, { leaseMs: LEASE_MS });
    await scenario.app.listen(0, '127.0.0.1');
    const address = scenario.app.getHttpServer().address() as AddressInfo;
    url = `http://127.0.0.1:${address.port}/orders`;
  });
  afterAll(() => scenario?.close());

  const slowOrder = (idempotencyKey: string) =>
    request(scenario.server())
      .post('/orders')
      .set('Idempotency-Key', idempotencyKey)
      .send({ amount: 7, delayMs: HANDLER_MS });

  /** Resolves once the key's claim is in the table: the first request holds it. */
  const claimed = async (idempotencyKey: string) => {
    for (;;) {
      const { rows } = await scenario.db.query('SELECT 1 FROM idempotency_keys WHERE key = $1', [
        idempotencyKey,
      ]);
      if (rows.length > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };

  it('answers the duplicate of a 2 s request 409 key_in_progress with Retry-After: 1, not the lease left', async () => {
    const k = key('header');
    const first = slowOrder(k).then((r) => r);
    await claimed(k);
    const duplicate = await slowOrder(k);
    expect(duplicate.status).toBe(409);
    expect(duplicate.body).toMatchObject({ code: 'key_in_progress', status: 409 });
    expect(duplicate.headers['retry-after']).toBe('1');
    expect((await first).status).toBe(201);
    expect(await scenario.sideEffects('orders')).toBe(1);
  }, 30_000);

  it('lets idempotentFetch() get the answer of the request it duplicated within seconds, not a minute', async () => {
    const k = key('client');
    const first = slowOrder(k).then((r) => r);
    await claimed(k);
    const store = new MemoryOperationStore();
    await store.set('pay', k);
    const began = Date.now();
    const answer = await idempotentFetch(
      url,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 7, delayMs: HANDLER_MS }),
      },
      // maxDelayMs as long as the lease: the client waits what the server says, uncut.
      { intent: 'pay', store, maxDelayMs: LEASE_MS, maxElapsedMs: 2 * LEASE_MS },
    );
    const tookMs = Date.now() - began;
    const firstAnswer = await first;
    expect(firstAnswer.status).toBe(201);
    expect(answer.status).toBe(201);
    expect(answer.headers.get('idempotent-replayed')).toBe('true');
    expect(await answer.json()).toEqual(firstAnswer.body);
    // The handler's 2 s plus a second's wait or two; the lease's 60 s before.
    expect(tookMs).toBeLessThan(8000);
    expect(await scenario.sideEffects('orders')).toBe(2);
  }, 90_000);
});
