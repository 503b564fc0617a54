import { type AliasRead, aliasesApart, readsPerAlias, responseKeys } from './alias-reads.js';

const node = (name: string, alias?: string) => ({
  name: { value: name },
  ...(alias === undefined ? {} : { alias: { value: alias } }),
});

describe('responseKeys', () => {
  it.each([
    ['one unaliased node', [node('url')], ['url']],
    ['two aliases, in selection order', [node('url', 'b'), node('url', 'a')], ['b', 'a']],
    [
      'a key twice (fragments) once',
      [node('url', 'a'), node('url', 'b'), node('url', 'a')],
      ['a', 'b'],
    ],
    ['an alias beside the bare name', [node('url'), node('url', 'big')], ['url', 'big']],
  ])('%s', (_case, nodes, keys) => {
    expect(responseKeys(nodes)).toEqual(keys);
  });
});

describe('readsPerAlias', () => {
  it.each([
    ['a getter leaf under two keys', { getter: true, leaf: true, keys: 2, wrapped: true }, true],
    ['a getter leaf under one key', { getter: true, leaf: true, keys: 1, wrapped: true }, false],
    [
      'data under two keys (reads the same)',
      { getter: false, leaf: true, keys: 2, wrapped: true },
      false,
    ],
    [
      'a getter of an object type (aliases share it)',
      { getter: true, leaf: false, keys: 3, wrapped: true },
      false,
    ],
    [
      "no resolver of its own (the executor's reads the one object)",
      { getter: true, leaf: true, keys: 2, wrapped: false },
      false,
    ],
  ])('%s', (_case, field, expected) => {
    expect(readsPerAlias(field)).toBe(expected);
  });
});

describe('aliasesApart', () => {
  const at = (key: string, read: AliasRead) => ({ key, read });
  it.each([
    ['a fresh signature apart', { wire: 's1' }, [at('b', { wire: 's2' })], ['b']],
    ['the same answer is the place read', { wire: 's1' }, [at('b', { wire: 's1' })], []],
    ['an equal fresh list is the place read', { wire: ['x'] }, [at('b', { wire: ['x'] })], []],
    ['a failure is its own', { wire: 's1' }, [at('b', { failed: true })], ['b']],
    ['after a failed first, each its own', { failed: true }, [at('b', { wire: 's1' })], ['b']],
    [
      'only those that differ, in order',
      { wire: 1 },
      [at('b', { wire: 1 }), at('c', { wire: 2 }), at('d', { wire: 3 })],
      ['c', 'd'],
    ],
  ] as [string, AliasRead, { key: string; read: AliasRead }[], string[]][])(
    '%s',
    (_case, first, later, keys) => {
      expect(aliasesApart(first, later).map(({ key }) => key)).toEqual(keys);
    },
  );
});
