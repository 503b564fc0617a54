import { type QueryRunner } from 'typeorm';
import { noteAfterEnd, whenTold, withDataAtCommit } from './after-request-commit.js';

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

describe('noteAfterEnd: a noted nested commit once a nested transaction ended (adversary 82)', () => {
  it.each<[string, number, number, 'released' | 'rolled-back', number | 'undone']>([
    // Released into the enclosing savepoint (depth 2), which is then rolled back to depth 1.
    ['its enclosing savepoint rolled back', 2, 1, 'rolled-back', 'undone'],
    // Three deep: rolled back past both savepoints.
    ['rolled back past it', 3, 1, 'rolled-back', 'undone'],
    // A savepoint begun after it rolled back: its work lives around that one.
    ['a later savepoint rolled back', 2, 2, 'rolled-back', 2],
    ['released into the request (depth 1): only its ROLLBACK undoes it', 1, 1, 'rolled-back', 1],
    // Its enclosing savepoint released: its work moves out with it…
    ['its enclosing savepoint released', 3, 2, 'released', 2],
    ['released into the request', 2, 1, 'released', 1],
    // …so a savepoint begun later at its old depth, rolled back, does not undo it.
    ['a deeper release leaves it where it is', 2, 3, 'released', 2],
    // A RELEASE or ROLLBACK TO that failed: the depth unchanged, nothing moves.
    ['an end that failed', 2, 2, 'rolled-back', 2],
  ])('%s', (_name, into, depthNow, end, expected) => {
    expect(noteAfterEnd(into, depthNow, end)).toBe(expected);
  });
});
