import request from 'supertest';
import { type Scenario, startScenario } from './support/scenario.js';

/** `storeIf: (status) => status < 500`: a server error is not an answer to keep. */
describe('storeIf', () => {
  let s: Scenario;
  beforeAll(async () => {
    s = await startScenario('store_if', 'express', { storeIf: (status) => status < 500 });
  });
  afterAll(async () => {
    await s?.close();
  });

  const post = (path: string, key: string, body: object) =>
    request(s.server()).post(path).set('Idempotency-Key', key).set('X-Tenant-Id', '1').send(body);

  it('keeps a 500 out of the store: the key is given back, and a retry runs the handler again', async () => {
    const first = await post('/crash', 'no-store-500', { amount: 1 });
    expect(first.status).toBe(500);
    const { rows } = await s.db.query<{ state: string; released: boolean }>(
      `SELECT state, locked_until IS NULL AS released FROM idempotency_keys WHERE key = $1`,
      ['no-store-500'],
    );
    expect(rows).toEqual([{ state: 'started', released: true }]);
    const again = await post('/crash', 'no-store-500', { amount: 1 });
    expect(again.status).toBe(500);
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    // Each run's write rolled back with it.
    expect(await s.sideEffects('crash')).toBe(0);
  });

  it('still stores what it allows', async () => {
    const first = await post('/orders', 'store-201', { amount: 2 });
    const again = await post('/orders', 'store-201', { amount: 2 });
    expect(first.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(await s.sideEffects('orders')).toBe(1);
  });
});
