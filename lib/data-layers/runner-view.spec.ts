import { type EntityManager, type QueryRunner } from 'typeorm';
import { runnerView, viewSaysActive } from './runner-view.js';

describe("viewSaysActive: a runner view's isTransactionActive outside a save (adversary 80b)", () => {
  it.each<[string, boolean, boolean, boolean, boolean]>([
    [
      "its code's runner, none of its own open (before its start, after its commit)",
      false,
      false,
      false,
      false,
    ],
    ["its code's runner, its own transaction open", false, false, true, true],
    ["TypeORM's lock check: the request's transaction holds the lock", false, true, false, true],
    ["a phase's manager: handed as a transaction's", true, false, false, true],
  ])('%s', (_name, phaseManager, lockCheck, ownOpen, expected) => {
    expect(viewSaysActive(phaseManager, lockCheck, ownOpen)).toBe(expected);
  });
});

describe("a runner view's [Symbol.asyncDispose] (TypeORM 1.x `await using`, adversary 81)", () => {
  // TypeORM 1.x needs it (its runners define it): the runtimes it runs on have it.
  const asyncDispose = (Symbol as unknown as { asyncDispose: symbol }).asyncDispose;

  it.each<[string, number, string[]]>([
    ['none of its own open: released only', 0, ['release']],
    ['its transaction open: committed, then released', 1, ['commit', 'release']],
    ['two of its own open: each committed, innermost first', 2, ['commit', 'commit', 'release']],
  ])('%s', async (_name, ownOpen, expected) => {
    const calls: string[] = [];
    let open = ownOpen;
    const runner = {
      transactionDepth: 1 + ownOpen,
      data: {},
      // TypeORM's own would set the depth to 1 on the shared runner: never called.
      [asyncDispose]: () => Promise.reject(new Error("TypeORM's own dispose")),
      commitTransaction() {
        calls.push('commit');
        open--;
        return Promise.resolve();
      },
      release() {
        calls.push('release');
        return Promise.resolve();
      },
    } as unknown as QueryRunner;
    const view = runnerView(
      runner,
      () => ({}) as EntityManager,
      undefined,
      undefined,
      () => open > 0,
    );
    await (view as unknown as Record<symbol, () => Promise<void>>)[asyncDispose]();
    expect(calls).toEqual(expected);
    expect((runner as unknown as { transactionDepth: number }).transactionDepth).toBe(1 + ownOpen);
  });
});
