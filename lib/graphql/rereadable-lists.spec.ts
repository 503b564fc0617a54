import { rereadableList } from './rereadable-lists.js';

function* generated(): Generator<number> {
  yield 1;
}

class Bag implements Iterable<number> {
  *[Symbol.iterator](): Iterator<number> {
    yield 1;
  }
}

describe('rereadableList', () => {
  it.each([
    ['a Set', new Set(['nest', 'pg']), true],
    ['a Map', new Map([['a', 1]]), true],
    ['an Int32Array', new Int32Array([1, 2, 3]), true],
    ['a Float64Array', new Float64Array(2), true],
    ['a DataView (no list)', new DataView(new ArrayBuffer(2)), false],
    ['a generator', generated(), false],
    ["a Map's values()", new Map([['a', 1]]).values(), false],
    ["a class's own iterator (app code)", new Bag(), false],
    ['a string', 'abc', false],
    ['null', null, false],
    ['a plain object', { a: 1 }, false],
  ])('%s: %s', (_, value, expected) => {
    expect(rereadableList(value)).toBe(expected);
  });
});
