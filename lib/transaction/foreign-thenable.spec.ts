import { AsyncLocalStorage } from 'node:async_hooks';
import { isLazyAsyncIterable } from './bound-iterable.js';
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

const where = new AsyncLocalStorage<string>();

/** An async generator recording the context its first step runs in. */
async function* stream(seen: (string | undefined)[]) {
  seen.push(where.getStore());
  yield 1;
}

/** Each lazy async iterable in `value`, top level and one level in. */
function streamsIn(value: unknown): AsyncIterable<number>[] {
  if (isLazyAsyncIterable(value)) return [value as AsyncIterable<number>];
  const items = Array.isArray(value)
    ? (value as unknown[])
    : typeof value === 'object' && value !== null
      ? Object.values(value)
      : [];
  return items.filter(isLazyAsyncIterable) as AsyncIterable<number>[];
}

describe('startedInside: a lazy stream in what outside() hands back is read where it was made (adversary 104)', () => {
  it.each<[string, (seen: (string | undefined)[]) => unknown, number]>([
    ['a stream', (seen) => stream(seen), 1],
    ['a stream an async callback resolves to', async (seen) => stream(seen), 1],
    ['a stream in an array', (seen) => [stream(seen), 1], 1],
    ['a stream in an object literal', (seen) => ({ rows: stream(seen), n: 1 }), 1],
    [
      'streams in an array an async callback resolves to',
      async (seen) => [stream(seen), stream(seen)],
      2,
    ],
    [
      'a stream in an object an async callback resolves to',
      async (seen) => ({ rows: stream(seen) }),
      1,
    ],
  ])('%s', async (_name, make, bound) => {
    const seen: (string | undefined)[] = [];
    const result = where.run('outside', () => startedInside(make(seen)));
    await where.run('request', async () => {
      const value = await result;
      for (const rows of streamsIn(value)) for await (const row of rows) void row;
    });
    expect(seen).toEqual(Array(bound).fill('outside'));
  });

  it.each<[string, () => unknown]>([
    ['an array with no stream', () => [1, 2]],
    ['an object with no stream', () => ({ a: 1 })],
    [
      "a class's instance holding a stream",
      () =>
        new (class {
          rows = stream([]);
        })(),
    ],
  ])('%s: the same object', (_name, make) => {
    const value = make();
    expect(startedInside(value)).toBe(value);
  });
});
