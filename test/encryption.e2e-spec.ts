import { randomBytes } from 'node:crypto';
import request from 'supertest';
import { ADAPTERS } from './support/test-app.js';
import { type Scenario, startScenario } from './support/scenario.js';

/**
 * Stored responses encrypted at rest, on real PostgreSQL: the row holds no plaintext, every
 * replay is read from the database (the replay cache is off), and a row copied under another
 * key is a 500 that says why, never that row's body.
 */
describe.each(ADAPTERS)('encryption at rest on %s', (adapter) => {
  let s: Scenario;
  const key = randomBytes(32).toString('base64');
  let n = 0;
  const newKey = () => `sealed-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    s = await startScenario('encryption', adapter, {
      encryption: { keys: [{ id: 'k-2026', key }] },
      replayCacheSize: 0,
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  const order = (idempotencyKey: string, note: string) =>
    request(s.server())
      .post('/orders')
      .set('Idempotency-Key', idempotencyKey)
      .set('X-Tenant-Id', '1')
      .send({ amount: 5, note });

  it('stores no plaintext, and replays byte for byte', async () => {
    const k = newKey();
    const first = await order(k, 'Ada Lovelace, card 4242');
    expect(first.status).toBe(201);
    const { rows } = await s.db.query<{ response_body: Buffer; response_headers: object }>(
      'SELECT response_body, response_headers FROM idempotency_keys WHERE key = $1',
      [k],
    );
    expect(rows[0].response_body.includes('Lovelace')).toBe(false);
    expect(rows[0].response_headers).toEqual({ $sealed: '1' });
    const again = await order(k, 'Ada Lovelace, card 4242');
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers['content-type']).toBe(first.headers['content-type']);
    expect(again.text).toBe(first.text);
  });

  it('answers 500 stored_response_unreadable for a row copied under another key', async () => {
    const [victim, thief] = [newKey(), newKey()];
    expect((await order(victim, 'victim')).status).toBe(201);
    expect((await order(thief, 'thief')).status).toBe(201);
    await s.db.query(
      `UPDATE idempotency_keys SET response_body = (SELECT response_body FROM idempotency_keys
       WHERE key = $1) WHERE key = $2`,
      [victim, thief],
    );
    const res = await order(thief, 'thief');
    expect(res.status).toBe(500);
    expect(res.body).toMatchObject({ code: 'stored_response_unreadable', status: 500 });
    expect(res.body.detail).toContain('does not authenticate');
    expect(res.text).not.toContain('victim');
  });
});
