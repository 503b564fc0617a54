import { type DataSource } from 'typeorm';
import { IdempotencyLeaseLostError } from '../lib/index.js';
import { type ActiveClaim } from '../lib/shapes/active-claim.js';
import { decide } from '../lib/decisions/decide.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';

/**
 * The store's fence on real PostgreSQL: a stale worker's writes must fail even when its
 * `lock_version` matches again, after the key was given back and claimed anew.
 */
describe('the fencing token', () => {
  let database: MigratedDatabase;
  let dataSource: DataSource;
  let store: PostgresClaimStore;
  const fp = Buffer.alloc(32, 9);
  const response = {
    status: 201,
    headers: { 'content-type': 'application/json' },
    body: Buffer.from('{"a":1}'),
  };

  beforeAll(async () => {
    database = await createMigratedDatabase('fencing');
    dataSource = database.dataSource;
    await dataSource.query('CREATE TABLE effects (worker text)');
    store = new PostgresClaimStore(new IdempotencyDatabase(() => dataSource, 5000));
  });
  afterAll(async () => {
    await database?.drop();
  });

  const expire = (key: string) =>
    dataSource.query(
      `UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE key = $1`,
      [key],
    );
  const claimed = async (key: string): Promise<ActiveClaim> => {
    const outcome = await store.claim({ tenantId: '1', key }, fp, 60_000);
    if (outcome.kind !== 'claimed') throw new Error(`expected to claim ${key}`);
    return outcome.claim;
  };

  const takeOver = async (key: string): Promise<ActiveClaim> => {
    await expire(key);
    const seen = await store.claim({ tenantId: '1', key }, fp, 60_000);
    if (seen.kind !== 'existing') throw new Error('expected the existing row');
    const decision = decide(seen.existing, fp);
    if (decision.kind !== 'take-over') throw new Error(`expected take-over, got ${decision.kind}`);
    const claim = await store.takeOver({ tenantId: '1', key }, decision.fence, 60_000);
    if (!claim) throw new Error('expected to win the takeover');
    return claim;
  };
  const row = async (key: string) =>
    (
      (await dataSource.query(
        'SELECT state, lock_version, claim_id, phase_results FROM idempotency_keys WHERE key = $1',
        [key],
      )) as Record<string, unknown>[]
    )[0];

  it('a stale worker cannot write to a key that was purged and claimed anew', async () => {
    const key = 'reclaimed';
    const a = await claimed(key);
    const b = await takeOver(key);
    expect(await store.finish(b, response)).toBe(true);
    await dataSource.query('DELETE FROM idempotency_keys WHERE key = $1', [key]); // the purge
    const c = await claimed(key);
    expect(c.lockVersion).toBe(a.lockVersion); // lock_version alone would let A through
    expect(c.claimId).not.toBe(a.claimId);

    expect(await store.finish(a, response)).toBe(false);
    await expect(
      store.commitPhase(a, 'one', async (manager) => {
        await manager.query(`INSERT INTO effects VALUES ('A')`);
        return { from: 'A' };
      }),
    ).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
    expect(await store.extendLease(a)).toBe(false);
    await store.release(a, true);

    expect(await row(key)).toEqual({
      state: 'started',
      lock_version: '0',
      claim_id: c.claimId,
      phase_results: {},
    });
    expect(await dataSource.query('SELECT * FROM effects')).toEqual([]);
    expect(await store.finish(c, response)).toBe(true);
  });

  it('a takeover gets back a phase result jsonb could not hold as JSON (a NUL, half an emoji)', async () => {
    // Adversary 39c: such a result, after the call it records was made, was a stored 500.
    const key = 'unstorable-result';
    const a = await claimed(key);
    const result = { description: 'coffee and \ud83c', note: 'a\u0000b', 'k\u0000': ['\udf70'] };
    expect(await store.commitPhase(a, 'psp', () => Promise.resolve(result))).toEqual(result);
    const b = await takeOver(key);
    expect(b.phaseResults).toEqual({ psp: result });
    expect(await store.finish(b, response)).toBe(true);
  });

  it('giving back a fresh first claim deletes it: the key is free for a corrected request', async () => {
    const key = 'fresh';
    const a = await claimed(key);
    await store.release(a, true);
    expect(await row(key)).toBeUndefined();
  });

  it('giving back a claim that was taken over never deletes it, nor its claim id', async () => {
    // A crashed worker may have sent `<claim_id>:<phase>` to the PSP inside its first phase
    // before it died: the row must outlive this takeover's failure, so the next one sends the
    // same derived key.
    const key = 'taken-over';
    const a = await claimed(key);
    const b = await takeOver(key);
    await store.release(b, true); // B failed before its handler ran (a pipe, a guard)
    expect(await row(key)).toMatchObject({
      state: 'started',
      lock_version: '1',
      claim_id: a.claimId,
    });
    const c = await takeOver(key);
    expect(c.claimId).toBe(a.claimId);
    expect(c.lockVersion).toBe('2');
  });

  it('exactly one of several workers takes an expired lease over', async () => {
    const key = 'stampede';
    await claimed(key);
    await expire(key);
    const seen = await store.claim({ tenantId: '1', key }, fp, 60_000);
    if (seen.kind !== 'existing' || seen.existing.state !== 'started')
      throw new Error('expected started');
    const fence = seen.existing.fence;
    const winners = await Promise.all(
      Array.from({ length: 8 }, () => store.takeOver({ tenantId: '1', key }, fence, 60_000)),
    );
    expect(winners.filter(Boolean)).toHaveLength(1);
  });
});
