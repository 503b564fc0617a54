import * as graphql from 'graphql';
import { GraphQLInt, GraphQLList, GraphQLNonNull, type GraphQLOutputType } from 'graphql';
import { fitsListType, isAsyncOneShot, readAsync, settledContainer } from './middleware-input.js';

const list = new GraphQLList(GraphQLInt);

describe('fitsListType', () => {
  it.each<[string, GraphQLOutputType, unknown, boolean]>([
    ['a scalar, any value', GraphQLInt, { cents: 1 }, true],
    ['a list, an array', list, [1, 2], true],
    ['a non-null list, an array', new GraphQLNonNull(list), [], true],
    ['a list, null', list, null, true],
    ['a list, undefined', list, undefined, true],
    ['a list, a record (a jsonb column the middleware maps)', list, { 'A-1': 2 }, false],
    ['a non-null list, a record', new GraphQLNonNull(list), { 'A-1': 2 }, false],
    ['a list, a Map', list, new Map([['A-1', 2]]), false],
    ['a list, a Set', list, new Set([1]), false],
    ['a list, a string', list, 'a,b', false],
    ["a list, a Map's keys() (read once into an array)", list, new Map([['A-1', 2]]).keys(), true],
    [
      'a list, a generator',
      list,
      (function* () {
        yield 1;
      })(),
      true,
    ],
    ["a list, a Set's values()", list, new Set([1]).values(), true],
  ])('%s', (_name, type, value, fits) => {
    expect(fitsListType(graphql, type, value)).toBe(fits);
  });
});

describe('isAsyncOneShot', () => {
  async function* rows() {
    yield await Promise.resolve(1);
  }
  const iterable = { [Symbol.asyncIterator]: () => rows() };
  it.each<[string, unknown, boolean]>([
    ['an async generator', rows(), true],
    ['an async iterable that is no iterator (read afresh each time)', iterable, false],
    ['an array', [1], false],
    ['a sync generator', [1].values(), false],
    ['null', null, false],
  ])('%s', (_name, value, oneShot) => {
    expect(isAsyncOneShot(value)).toBe(oneShot);
  });
});

describe('readAsync', () => {
  it('reads an async generator to its end', async () => {
    async function* rows() {
      yield 'A';
      yield await Promise.resolve('B');
    }
    await expect(readAsync(rows())).resolves.toEqual(['A', 'B']);
  });

  it('rejects with what it throws part-way', async () => {
    async function* rows() {
      yield 'A';
      throw new Error('bad line B');
    }
    await expect(readAsync(rows())).rejects.toThrow('bad line B');
  });
});

describe('settledContainer', () => {
  const line = { sku: 'A' };
  const same = new Map([['A', line]]);
  it.each<[string, unknown, unknown]>([
    ['a Map of Promises, awaited', new Map([['A', Promise.resolve(line)]]), new Map([['A', line]])],
    ['a Set of Promises, awaited', new Set([Promise.resolve(line)]), new Set([line])],
    ['a record of Promises, awaited', { A: Promise.resolve(line) }, { A: line }],
    ['a Map without Promises', same, same],
    ['a scalar', 'a,b', 'a,b'],
    ['null', null, null],
  ])('%s', async (_name, container, settled) => {
    expect(await settledContainer(container)).toEqual(settled);
  });

  it('gives a container without Promises back as it is', async () => {
    expect(await settledContainer(same)).toBe(same);
  });

  it('rejects with a value that rejects', async () => {
    const failing = Promise.reject(new Error('catalogue down'));
    await expect(settledContainer(new Map([['A', failing]]))).rejects.toThrow('catalogue down');
  });
});
