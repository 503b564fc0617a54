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
});
