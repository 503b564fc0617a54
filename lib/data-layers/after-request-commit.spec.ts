import { type QueryRunner } from 'typeorm';
import { whenTold, withDataAtCommit } from './after-request-commit.js';

describe("whenTold: when a nested transaction's event reaches TypeORM's subscribers", () => {
  it.each<[string, 'now' | 'after-request-commit']>([
    ['BeforeTransactionStart', 'now'],
    ['AfterTransactionStart', 'now'],
    // May still write in the transaction, or refuse its commit: at the RELEASE.
    ['BeforeTransactionCommit', 'now'],
    // "Committed": durable only at the request's COMMIT (adversary 80b).
    ['AfterTransactionCommit', 'after-request-commit'],
    ['BeforeTransactionRollback', 'now'],
    // Its savepoint's rollback is real at once.
    ['AfterTransactionRollback', 'now'],
  ])('%s: %s', (event, expected) => {
    expect(whenTold(event)).toBe(expected);
  });
});

describe('withDataAtCommit: a later afterTransactionCommit reads the data of its commit (adversary 81)', () => {
  it.each<[string, object, ((runner: QueryRunner) => void) | undefined, object]>([
    ['its data left as it was', { item: 'a' }, undefined, { item: 'a' }],
    // One runner, one transaction per item: the next item's set after this commit.
    ['its data set anew after', { item: 'b' }, undefined, { item: 'b' }],
    // `save(…, { data })`: TypeORM puts the old one back once it committed.
    ['its data put back after', {}, undefined, {}],
    // A subscriber that sets the runner's data: its own, kept.
    [
      'a subscriber set another',
      { item: 'b' },
      (runner) => (runner.data = { sent: true }),
      { sent: true },
    ],
  ])('%s', async (_name, now, subscriberSets, after) => {
    const kept = { item: 'a' };
    const runner = { data: now } as unknown as QueryRunner;
    const seen = await withDataAtCommit(runner, kept, () => {
      const read: unknown = runner.data;
      subscriberSets?.(runner);
      return Promise.resolve(read);
    });
    // The runner itself, with the data of its commit, then as it was (or as the subscriber left it).
    expect(seen).toBe(kept);
    expect(runner.data).toEqual(after);
  });

  it('puts the data back when a subscriber throws', async () => {
    const now = { item: 'b' };
    const runner = { data: now } as unknown as QueryRunner;
    await expect(
      withDataAtCommit(runner, { item: 'a' }, () => Promise.reject(new Error('bus down'))),
    ).rejects.toThrow('bus down');
    expect(runner.data).toBe(now);
  });
});
