import { whileSubscribed } from './while-subscribed.js';

/** A promise settled by the test, so that the order of events is the test's own. */
function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const settled = () => new Promise((resolve) => setImmediate(resolve));

describe('whileSubscribed', () => {
  it.each<[string, boolean, 'resolve' | 'reject', unknown[], unknown[], unknown[]]>([
    // name, left before it settled, outcome, values seen, errors seen, orphaned values
    ['a value for a subscriber still there', false, 'resolve', ['claim'], [], []],
    ['a value after the subscriber left: orphaned', true, 'resolve', [], [], ['claim']],
    ['an error for a subscriber still there', false, 'reject', [], ['down'], []],
    ['an error after the subscriber left: dropped', true, 'reject', [], [], []],
  ])('%s', async (_name, leave, outcome, values, errors, orphans) => {
    const pending = deferred<string>();
    const seen: unknown[] = [];
    const failed: unknown[] = [];
    const orphaned: unknown[] = [];
    const subscription = whileSubscribed(pending.promise, (value) =>
      orphaned.push(value),
    ).subscribe({
      next: (value) => seen.push(value),
      error: (error: unknown) => failed.push(error),
    });
    if (leave) subscription.unsubscribe();
    if (outcome === 'resolve') pending.resolve('claim');
    else pending.reject('down');
    await settled();
    expect(seen).toEqual(values);
    expect(failed).toEqual(errors);
    expect(orphaned).toEqual(orphans);
  });

  it('does not orphan a value its subscriber received, when it leaves afterwards', async () => {
    const orphaned: unknown[] = [];
    const subscription = whileSubscribed(Promise.resolve('claim'), (value) =>
      orphaned.push(value),
    ).subscribe();
    await settled();
    subscription.unsubscribe();
    await settled();
    expect(orphaned).toEqual([]);
  });

  it.each<[string, boolean, boolean]>([
    // name, left before the value, whether `left` hears of it
    ['left before the value: told, with the give-back to wait for', true, true],
    ['left after the value: not told (nothing in flight)', false, false],
  ])('%s', async (_name, early, told) => {
    const pending = deferred<string>();
    const givenBack = deferred<void>();
    const order: string[] = [];
    let landed: Promise<unknown> | undefined;
    const subscription = whileSubscribed(
      pending.promise,
      () => givenBack.promise.then(() => order.push('given back')),
      (promise) => (landed = promise),
    ).subscribe();
    if (early) subscription.unsubscribe();
    pending.resolve('claim');
    await settled();
    if (!early) subscription.unsubscribe();
    expect(landed !== undefined).toBe(told);
    void landed?.then(() => order.push('landed'));
    givenBack.resolve();
    await settled();
    expect(order).toEqual(told ? ['given back', 'landed'] : []);
  });
});
