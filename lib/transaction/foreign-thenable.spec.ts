import { isForeignThenable, startedInside } from './foreign-thenable.js';

/** A builder that runs its work in each `then()`, as Drizzle's and Kysely's do. */
function builder(runs: string[], name: string): PromiseLike<string> {
  const then: PromiseLike<string>['then'] = (onFulfilled, onRejected) => {
    runs.push(name);
    return Promise.resolve(name).then(onFulfilled, onRejected);
  };
  return { then };
}

describe('startedInside (what outside() hands back)', () => {
  it.each<[string, (runs: string[]) => unknown, string[]]>([
    ['a builder: started now', (runs) => builder(runs, 'a'), ['a']],
    [
      'an array of builders: each started now',
      (runs) => [builder(runs, 'a'), 1, builder(runs, 'b')],
      ['a', 'b'],
    ],
    ['a native Promise: as it is', () => Promise.resolve(1), []],
    ['a value: as it is', () => ({ then: 1 }), []],
    ['an object holding a builder: as it is', (runs) => ({ q: builder(runs, 'a') }), []],
  ])('%s', async (_name, make, started) => {
    const runs: string[] = [];
    const result = startedInside(make(runs));
    expect(runs).toEqual(started);
    // Awaited later, by the caller: no second run of the work.
    if (Array.isArray(result)) await Promise.all(result);
    else if (isForeignThenable(result) || result instanceof Promise) await result;
    expect(runs).toEqual(started);
  });
});
