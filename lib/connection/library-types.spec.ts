import pg from 'pg';
import { arrayOf, asBytes, asDate, libraryParser, withLibraryTypes } from './library-types.js';

describe('libraryParser: how the library reads its own columns, whatever the app set (adversary 105)', () => {
  it.each<[string, number, string, unknown]>([
    ['jsonb: stored headers, phase results', 3802, '{"a":{"b":1}}', { a: { b: 1 } }],
    ['json: the catalog rows of the schema check', 114, '[1,"x",null]', [1, 'x', null]],
    ['bytea in hex', 17, '\\x00ff41', Buffer.from([0, 255, 65])],
    ['bytea in the escape format', 17, 'a\\\\b\\001', Buffer.from([97, 92, 98, 1])],
    ['int8: a string, as node-postgres reads it', 20, '9007199254740993', '9007199254740993'],
    ['int4', 23, '-42', -42],
    ['int2', 21, '7', 7],
    ['oid', 26, '16384', 16384],
    ['float8', 701, '1.5', 1.5],
    ['bool true', 16, 't', true],
    ['bool false', 16, 'f', false],
    ['timestamptz', 1184, '2026-12-07 03:49:20.123456+00', new Date('2026-12-07T03:49:20.123Z')],
    ['timestamptz east', 1184, '2026-12-07 05:49:20+02', new Date('2026-12-07T03:49:20Z')],
    [
      'timestamptz west, minutes',
      1184,
      '2026-12-06 23:19:20-04:30',
      new Date('2026-12-07T03:49:20Z'),
    ],
    ['timestamptz infinity', 1184, 'infinity', Infinity],
    ['text[]', 1009, '{a,"b c","x\\"y",NULL}', ['a', 'b c', 'x"y', null]],
    ['text[] empty', 1009, '{}', []],
    ['int4[]', 1007, '{1,2,3}', [1, 2, 3]],
    ['uuid[]', 2951, '{8f0c-a,NULL}', ['8f0c-a', null]],
    ['float4[]', 1021, '{1.5,-2}', [1.5, -2]],
    ['float8[]', 1022, '{0.25,NULL}', [0.25, null]],
    [
      'timestamptz[]',
      1185,
      '{"2026-12-07 03:49:20+00",NULL}',
      [new Date('2026-12-07T03:49:20Z'), null],
    ],
    ['timestamp[]', 1115, '{"2026-12-07 03:49:20"}', [new Date(2026, 11, 7, 3, 49, 20)]],
    ['text: as it is', 25, 'plain', 'plain'],
    ['uuid: as it is', 2950, '8f0c…', '8f0c…'],
    ['name: as it is', 19, 'idempotency_keys', 'idempotency_keys'],
    ['numeric: as it is', 1700, '1.10', '1.10'],
    ['interval: as it is, never an object', 1186, '00:00:01', '00:00:01'],
  ])('%s', (_name, oid, text, expected) => {
    expect(libraryParser(oid, 'text')(text)).toEqual(expected);
  });

  it('binary results (a pool made with binary: true) are read as pg reads text (adversary 106)', () => {
    const jsonb = Buffer.concat([Buffer.from([1]), Buffer.from('{"a":1}')]);
    expect(libraryParser(3802, 'binary')(jsonb as unknown as string)).toEqual({ a: 1 });
    expect(libraryParser(19, 'binary')(Buffer.from('public') as unknown as string)).toBe('public');
  });

  it('a timestamp without a zone is local, as node-postgres reads it', () => {
    expect(asDate('2026-12-07 03:49:20')).toEqual(new Date(2026, 11, 7, 3, 49, 20));
  });

  it('the global registry changed by the app does not reach it', () => {
    const was = pg.types.getTypeParser(3802, 'text');
    pg.types.setTypeParser(3802, (text: string) => text);
    try {
      expect(libraryParser(3802)('{"a":1}')).toEqual({ a: 1 });
    } finally {
      pg.types.setTypeParser(3802, was);
    }
  });

  it('withLibraryTypes puts its parsers on a config, over any the config had', () => {
    const config = withLibraryTypes({ text: 'SELECT 1', types: { getTypeParser: () => String } });
    expect(config.text).toBe('SELECT 1');
    expect(config.types.getTypeParser(3802, 'text')('{}')).toEqual({});
  });

  // A text cut short ends with what was read: the inner loops stop at its end.
  it.each<[string, string, unknown[]]>([
    ['a quote never closed', '{"abc', ['abc']],
    ['no closing brace', '{a,b', ['a', 'b']],
    ['a backslash at the end', '{"a\\', ['a']],
    ['only the opening brace', '{', []],
  ])('arrayOf never loops on a text cut short: %s', (_name, text, expected) => {
    expect(arrayOf(String)(text)).toEqual(expected);
  });

  it('helpers agree with node-postgres on plain values', () => {
    expect(asBytes('\\x')).toEqual(Buffer.alloc(0));
    expect(arrayOf(Number)('{}')).toEqual([]);
  });
});
