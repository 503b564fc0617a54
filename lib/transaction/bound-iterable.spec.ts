import { AsyncLocalStorage } from 'node:async_hooks';
import { Readable } from 'node:stream';
import { boundHere, isLazyAsyncIterable } from './bound-iterable.js';

const where = new AsyncLocalStorage<string>();

/** An async generator recording the context each of its steps runs in. */
async function* rows(seen: (string | undefined)[]) {
  try {
    seen.push(where.getStore());
    yield 1;
    seen.push(where.getStore());
    yield 2;
  } finally {
    seen.push(where.getStore());
  }
}

/** An iterable (not itself an iterator) handing out such a generator. */
function iterable(seen: (string | undefined)[]): AsyncIterable<number> {
  return { [Symbol.asyncIterator]: () => rows(seen) };
}

describe('isLazyAsyncIterable: what outside() binds to its scope (adversary 103)', () => {
  it.each<[string, () => unknown, boolean]>([
    ['an async generator (Kysely stream())', () => rows([]), true],
    ['an async iterable', () => iterable([]), true],
    ['a Node stream (pg-query-stream)', () => Readable.from([1]), false],
    ['a promise', () => Promise.resolve(1), false],
    ['an array', () => [1], false],
    ['null', () => null, false],
  ])('%s -> %s', (_name, make, lazy) => {
    expect(isLazyAsyncIterable(make())).toBe(lazy);
  });
});

describe('boundHere: a lazy async iterable runs in the context it was bound in', () => {
  it.each<[string, (seen: (string | undefined)[]) => AsyncIterable<number>]>([
    ['an async generator', (seen) => rows(seen)],
    ['an iterable handing out one', (seen) => iterable(seen)],
  ])('%s, read to its end and left early', async (_name, make) => {
    for (const early of [false, true]) {
      const seen: (string | undefined)[] = [];
      const bound = where.run('outside', () => boundHere(make(seen)));
      const read = await where.run('request', async () => {
        const got: number[] = [];
        for await (const row of bound) {
          got.push(row);
          if (early) break;
        }
        return got;
      });
      expect({ read, seen }).toEqual(
        early
          ? { read: [1], seen: ['outside', 'outside'] }
          : { read: [1, 2], seen: ['outside', 'outside', 'outside'] },
      );
    }
  });
});
