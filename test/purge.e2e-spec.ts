import request from 'supertest';
import { IdempotencyPurger, type KeyScope } from '../lib/index.js';
import { MemoryClaimStore } from '../lib/testing/index.js';
import { type Scenario, startScenario } from './support/scenario.js';

describe('the batched retention purge', () => {
  let s: Scenario;
  beforeAll(async () => {
    s = await startScenario('purge', 'express', {
      retentionMs: 60_000,
      abandonedKeyRetentionMs: 3_600_000,
      processedMessagesRetentionMs: 600_000,
      purgeBatchSize: 2,
    });
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
    // A crashed request's claim: unfinished, lease long expired, older than the retention but
    // within the abandoned-key horizon (1 hour).
    await s.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until, recovery_point, created_at)
       VALUES (1, 'crashed', '\\x00', now() - interval '1 minute', 'charge_created', now() - interval '10 minutes')`,
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

  it('deletes keys left unfinished past their horizon, never one whose lease is live', async () => {
    await s.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until, created_at) VALUES
         (1, 'abandoned-1', '\\x00', now() - interval '1 day', now() - interval '2 hours'),
         (1, 'abandoned-2', '\\x00', NULL, now() - interval '3 hours'),
         (1, 'abandoned-3', '\\x00', now() - interval '1 day', now() - interval '5 hours'),
         (1, 'leased-old', '\\x00', now() + interval '1 minute', now() - interval '2 hours'),
         (1, 'unfinished-recent', '\\x00', now() - interval '1 minute', now() - interval '30 minutes')`,
    );
    await s.app.get(IdempotencyPurger).purgeExpired();
    const left = (await keys()).filter((key) => /abandoned|leased|unfinished/.test(key));
    expect(left).toEqual(['leased-old', 'unfinished-recent']);
  });

  it('deletes consumers’ message ids processed before their retention, in batches', async () => {
    await s.db.query(
      `INSERT INTO processed_messages (consumer, message_id, processed_at) VALUES
         ('psp', 'old-1', now() - interval '11 minutes'),
         ('psp', 'old-2', now() - interval '1 day'),
         ('psp', 'old-3', now() - interval '2 days'),
         ('psp', 'recent', now() - interval '9 minutes')`,
    );
    await s.app.get(IdempotencyPurger).purgeExpired();
    const { rows } = await s.db.query<{ message_id: string }>(
      'SELECT message_id FROM processed_messages ORDER BY message_id',
    );
    expect(rows.map((r) => r.message_id)).toEqual(['recent']);
  });
});

describe('the purge with a claim store that fails', () => {
  /** A store whose purge cannot reach its server. */
  class Unreachable extends MemoryClaimStore {
    override purgeBatch(): Promise<KeyScope[]> {
      return Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:6379'));
    }
  }
  let s: Scenario;
  beforeAll(async () => {
    s = await startScenario('purge_failing', 'express', {
      retentionMs: 60_000,
      processedMessagesRetentionMs: 600_000,
      claimStores: { redis: new Unreachable() },
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('purges every other store and table, then says what failed', async () => {
    const old = await request(s.server())
      .post('/orders')
      .set('Idempotency-Key', 'purged-anyway')
      .set('X-Tenant-Id', '1')
      .send({ amount: 5 });
    expect(old.status).toBe(201);
    await s.db.query(
      `UPDATE idempotency_keys SET created_at = now() - interval '2 minutes',
       finished_at = now() - interval '2 minutes' WHERE key = 'purged-anyway'`,
    );
    // Purged after the claim stores: a failing store must not leave it behind.
    await s.db.query(
      `INSERT INTO processed_messages (consumer, message_id, processed_at)
       VALUES ('psp-webhooks', 'evt_old', now() - interval '1 hour')`,
    );
    await expect(s.app.get(IdempotencyPurger).purgeExpired()).rejects.toThrow(
      'connect ECONNREFUSED 127.0.0.1:6379',
    );
    const processed = await s.db.query(
      `SELECT 1 FROM processed_messages WHERE message_id = 'evt_old'`,
    );
    expect(processed.rowCount).toBe(0);
    const { rowCount } = await s.db.query(
      `SELECT 1 FROM idempotency_keys WHERE key = 'purged-anyway'`,
    );
    expect(rowCount).toBe(0);
  });
});
