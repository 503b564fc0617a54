import request from 'supertest';
import { IdempotencyPurger } from '../lib/index.js';
import { type Scenario, startScenario } from './support/scenario.js';

describe('the batched retention purge', () => {
  let s: Scenario;
  beforeAll(async () => {
    s = await startScenario('purge', 'express', { retentionMs: 60_000, purgeBatchSize: 2 });
  });
  afterAll(async () => {
    await s?.close();
  });

  const order = (key: string) =>
    request(s.server())
      .post('/orders')
      .set('Idempotency-Key', key)
      .set('X-Tenant-Id', '1')
      .send({ amount: 5 });
  /** Moves a key back in time: when it was claimed and when it finished. */
  const age = (key: string, created: string, finished = created) =>
    s.db.query(
      `UPDATE idempotency_keys
       SET created_at = now() - $2::interval, finished_at = now() - $3::interval WHERE key = $1`,
      [key, created, finished],
    );
  const keys = async () =>
    (await s.db.query<{ key: string }>('SELECT key FROM idempotency_keys ORDER BY key')).rows.map(
      (r) => r.key,
    );

  it('deletes finished keys past the retention in batches, keeps recent and unfinished ones', async () => {
    for (const key of ['old-1', 'old-2', 'old-3', 'old-4', 'old-5', 'recent', 'late']) {
      expect((await order(key)).status).toBe(201);
    }
    for (const key of ['old-1', 'old-2', 'old-3', 'old-4', 'old-5']) await age(key, '2 minutes');
    // Claimed long ago, but finished just now (taken over after an outage): its window starts
    // now, so a retry in the next minute must still be replayed.
    await age('late', '10 minutes', '1 second');
    // A crashed request's claim: unfinished, lease long expired, older than the retention.
    await s.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until, recovery_point, created_at)
       VALUES (1, 'crashed', '\\x00', now() - interval '1 hour', 'charge_created', now() - interval '1 day')`,
    );

    const deleted = await s.app.get(IdempotencyPurger).purgeExpired();
    expect(deleted).toBe(5);
    expect(await keys()).toEqual(['crashed', 'late', 'recent']);
    const late = await order('late');
    expect(late.headers['idempotent-replayed']).toBe('true');

    // A purged key is a new key again.
    const before = await s.sideEffects('orders');
    const again = await order('old-1');
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    expect(await s.sideEffects('orders')).toBe(before + 1);
  });
});
