import { aliasErrorsRead, answerAliasRead } from './alias-errors.js';

describe('aliasErrorsRead', () => {
  const a = new Error('a');
  const b = new Error('b');
  const read = (value: unknown, key: unknown) => answerAliasRead(value, {}, {}, { path: { key } });
  it.each<{ name: string; errors: [string, Error][]; key: unknown; expected: unknown }>([
    { name: 'no errors: the merged value', errors: [], key: 'a', expected: 'merged' },
    { name: 'one error: the merged value', errors: [['a', a]], key: 'b', expected: 'merged' },
    {
      name: 'the same error under two keys: the merged value',
      errors: [
        ['a', a],
        ['b', a],
      ],
      key: 'b',
      expected: 'merged',
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
  ])('$name', ({ errors, key, expected }) => {
    expect(read(aliasErrorsRead(new Map(errors), 'merged'), key)).toBe(expected);
  });

  it("an app's own function: given as it is, never called", () => {
    const own = () => 'called';
    expect(answerAliasRead(own, {}, {}, { path: { key: 'a' } })).toBe(own);
  });
});
