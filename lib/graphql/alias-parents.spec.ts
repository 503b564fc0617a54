import { sharedParents } from './alias-parents.js';

describe('sharedParents', () => {
  const row = { id: 7 };
  const item = { id: 8 };
  it.each<{
    name: string;
    parents: Record<string, unknown> | undefined;
    keys: string[];
    expected: Record<string, unknown> | undefined;
  }>([
    {
      name: 'no kept parents: none',
      parents: undefined,
      keys: ['o.a', 'o.b'],
      expected: undefined,
    },
    {
      name: 'one alias: as kept',
      parents: { 'o.a': row },
      keys: ['o.a'],
      expected: { 'o.a': row },
    },
    {
      name: 'kept at one alias: the other alias reads the same kept object',
      parents: { 'o.a': row },
      keys: ['o.b', 'o.a'],
      expected: { 'o.a': row, 'o.b': row },
    },
    {
      name: 'list items: each index shared',
      parents: { 'o.a.0': row, 'o.a.1': item },
      keys: ['o.a', 'o.b'],
      expected: { 'o.a.0': row, 'o.a.1': item, 'o.b.0': row, 'o.b.1': item },
    },
    {
      name: 'kept at both: each its own',
      parents: { 'o.a': row, 'o.b': item },
      keys: ['o.a', 'o.b'],
      expected: { 'o.a': row, 'o.b': item },
    },
    {
      name: 'deeper response keys: one alias own, never shared',
      parents: { 'o.a.x': row },
      keys: ['o.a', 'o.b'],
      expected: { 'o.a.x': row },
    },
    {
      name: 'a key that only starts alike: not under it',
      parents: { 'o.ab': row },
      keys: ['o.a', 'o.b'],
      expected: { 'o.ab': row },
    },
  ])('$name', ({ parents, keys, expected }) => {
    expect(sharedParents(parents, keys)).toEqual(expected);
  });
});
