import { sameData } from './same-data.js';

function nested(n: number, leaf: unknown): unknown {
  let value: unknown = { leaf };
  for (let i = 0; i < n; i += 1) value = { c: value };
  return value;
}

describe('sameData', () => {
  // Made in the case (a deep tree in a case's title would overflow jest's own printing).
  it.each<[string, () => [unknown, unknown], boolean]>([
    ['equal plain data', () => [{ a: [1, { b: 2 }] }, { a: [1, { b: 2 }] }], true],
    ['another value', () => [{ a: 1 }, { a: 2 }], false],
    ['a plain object and one without a prototype', () => [{}, Object.create(null)], false],
    ['deep equal trees', () => [nested(30_000, 1), nested(30_000, 1)], true],
    ['deep trees apart at their leaf', () => [nested(30_000, 1), nested(30_000, 2)], false],
    [
      'deep trees, a Date and a string',
      () => [nested(30_000, new Date(0)), nested(30_000, 'x')],
      false,
    ],
  ])('tells %s', (_name, make, same) => {
    const [a, b] = make();
    expect(sameData(a, b)).toBe(same);
  });
});
