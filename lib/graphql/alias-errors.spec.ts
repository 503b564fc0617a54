import { aliasErrorsRead, answerAliasRead } from './alias-errors.js';

describe('aliasErrorsRead', () => {
  const a = new Error('a');
  const b = new Error('b');
  const read = (value: unknown, key: unknown) => answerAliasRead(value, {}, {}, { path: { key } });
  it.each<{
    name: string;
    errors: [string, Error][];
    key: unknown;
    expected: unknown;
    fallback?: unknown;
    direct?: boolean;
  }>([
    { name: 'no errors: the merged value', errors: [], key: 'a', expected: 'merged' },
    { name: 'one error: the merged value', errors: [['a', a]], key: 'b', expected: 'merged' },
    {
      name: 'the same error under two keys: that error (its own, not the merged value)',
      errors: [
        ['a', a],
        ['b', a],
      ],
      key: 'b',
      expected: a,
    },
    {
      name: 'each key the merged value itself: the merged value',
      errors: [['a', a]],
      key: 'a',
      expected: a,
      fallback: a,
      direct: true,
    },
    {
      name: 'one key, another error than the merged value (a merged alias): its own',
      errors: [['x', b]],
      key: 'x',
      expected: b,
    },
    {
      name: 'two errors: the first alias its own',
      errors: [
        ['a', a],
        ['b', b],
      ],
      key: 'a',
      expected: a,
    },
    {
      name: 'two errors: the second alias its own',
      errors: [
        ['a', a],
        ['b', b],
      ],
      key: 'b',
      expected: b,
    },
    {
      name: 'two errors, another key: the merged value',
      errors: [
        ['a', a],
        ['b', b],
      ],
      key: 'c',
      expected: 'merged',
    },
    {
      name: 'two errors, no path told: the merged value',
      errors: [
        ['a', a],
        ['b', b],
      ],
      key: undefined,
      expected: 'merged',
    },
  ])('$name', ({ errors, key, expected, fallback = 'merged', direct }) => {
    const given = aliasErrorsRead(new Map(errors), fallback);
    // Nothing to tell apart: the value itself, no read.
    if (direct) expect(given).toBe(fallback);
    expect(read(given, key)).toBe(expected);
  });

  it("relocates a key's error to its own place, a single key too", () => {
    const moved = new Error('moved');
    const given = aliasErrorsRead(new Map([['x', a]]), a, (error, info) =>
      (info as { path: { key: string } }).path.key === 'x' && error === a ? moved : error,
    );
    expect(read(given, 'x')).toBe(moved);
    expect(read(given, 'y')).toBe(a);
  });

  it("an app's own function: given as it is, never called", () => {
    const own = () => 'called';
    expect(answerAliasRead(own, {}, {}, { path: { key: 'a' } })).toBe(own);
  });
});
