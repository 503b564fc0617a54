import pg from 'pg';
import { apartStatement, queryStatement } from './prefixed-query.js';

describe('queryStatement', () => {
  it.each<[string, unknown[], ReturnType<typeof queryStatement>]>([
    ['a text', ['SELECT 1'], { text: 'SELECT 1' }],
    ['a text and values', ['SELECT $1', [1]], { text: 'SELECT $1', values: [1] }],
    ["a text and TypeORM's undefined", ['SELECT 1', undefined], { text: 'SELECT 1' }],
    ['a config', [{ text: 'SELECT $1', values: [1] }], { text: 'SELECT $1', values: [1] }],
    [
      "Drizzle's config and values",
      [{ text: 'SELECT $1', rowMode: 'array' }, [1]],
      { text: 'SELECT $1', values: [1], rowMode: 'array' },
    ],
    [
      "Prisma's config with types",
      [{ text: 'SELECT 1', types: {} }],
      { text: 'SELECT 1', types: {} },
    ],
    [
      "a config with node-postgres' own per-query bound",
      [{ text: 'SELECT 1', query_timeout: 500, binary: true }],
      { text: 'SELECT 1', query_timeout: 500, binary: true },
    ],
    // Not carried: what the read-only round trip cannot send as node-postgres would.
    ['a callback', ['SELECT 1', () => undefined], undefined],
    ['values and a callback', ['SELECT $1', [1], () => undefined], undefined],
    ['a named statement', [{ name: 'q', text: 'SELECT 1' }], undefined],
    ['a cursor', [{ text: 'SELECT 1', submit: () => undefined }], undefined],
    ['no text', [{ values: [1] }], undefined],
  ])('%s', (_name, args, expected) => {
    expect(queryStatement(args)).toEqual(expected);
  });
});

describe('apartStatement: a plain read as it runs apart (adversary 105)', () => {
  it.each<[string, unknown[], ReturnType<typeof apartStatement>]>([
    ['a text', ['SELECT 1'], { text: 'SELECT 1' }],
    ['a config', [{ text: 'SELECT $1', values: [1] }], { text: 'SELECT $1', values: [1] }],
    // The name dropped: the same text and values, parsed once on the connection apart.
    [
      "node-postgres' named config",
      [{ name: 'get_item', text: 'SELECT $1', values: [1] }],
      { text: 'SELECT $1', values: [1] },
    ],
    [
      "Drizzle's prepared config and values",
      [{ name: 'get_item', text: 'SELECT $1', rowMode: 'array' }, [1]],
      { text: 'SELECT $1', values: [1], rowMode: 'array' },
    ],
    [
      "Prisma's named config with types",
      [{ name: 'p_0f', text: 'SELECT 1', rowMode: 'array', types: {} }],
      { text: 'SELECT 1', rowMode: 'array', types: {} },
    ],
    // Still not carried.
    ['a named cursor', [{ name: 'q', text: 'SELECT 1', submit: () => undefined }], undefined],
    [
      'a pg.Query (its own name, even undefined; submit on its prototype)',
      [new pg.Query({ text: 'SELECT 1' })],
      undefined,
    ],
    [
      'a named pg.Query',
      [new pg.Query({ name: 'get_item', text: 'SELECT $1', values: [1] })],
      undefined,
    ],
    [
      'an object of an app class with a name',
      [
        new (class Named {
          name = 'q';
          text = 'SELECT 1';
        })(),
      ],
      undefined,
    ],
    [
      'a named config with a null prototype',
      [Object.assign(Object.create(null) as object, { name: 'q', text: 'SELECT 1' })],
      { text: 'SELECT 1' },
    ],
    [
      'a named config and a callback',
      [{ name: 'q', text: 'SELECT 1' }, () => undefined],
      undefined,
    ],
    ['no text', [{ name: 'q' }], undefined],
  ])('%s', (_name, args, expected) => {
    expect(apartStatement(args)).toEqual(expected);
  });
});
