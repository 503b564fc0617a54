import { libraryBinaryParser } from './library-binary-types.js';

const int4 = (n: number) => {
  const bytes = Buffer.alloc(4);
  bytes.writeInt32BE(n);
  return bytes;
};
const int8 = (n: bigint) => {
  const bytes = Buffer.alloc(8);
  bytes.writeBigInt64BE(n);
  return bytes;
};
const float8 = (n: number) => {
  const bytes = Buffer.alloc(8);
  bytes.writeDoubleBE(n);
  return bytes;
};
/** A one-dimensional array of `oid`'s elements in binary (null: NULL). */
const array = (oid: number, elements: (Buffer | null)[]) =>
  Buffer.concat([
    int4(elements.length === 0 ? 0 : 1),
    int4(0),
    int4(oid),
    ...(elements.length === 0 ? [] : [int4(elements.length), int4(1)]),
    ...elements.flatMap((element) =>
      element === null ? [int4(-1)] : [int4(element.length), element],
    ),
  ]);
const utf8 = (text: string) => Buffer.from(text, 'utf8');
// 2026-12-07T10:30:00.123456Z in microseconds since 2000-01-01.
const MICROS = BigInt(Date.UTC(2026, 11, 7, 10, 30, 0, 123) - Date.UTC(2000, 0, 1)) * 1000n + 456n;

describe('libraryBinaryParser: the library reads binary results as pg reads text (adversary 106)', () => {
  it.each<[string, number, Buffer, unknown]>([
    ['bool true', 16, Buffer.from([1]), true],
    ['bool false', 16, Buffer.from([0]), false],
    ['bytea', 17, Buffer.from([0, 255, 92]), Buffer.from([0, 255, 92])],
    ['int8, a string', 20, int8(9007199254740993n), '9007199254740993'],
    ['int8 negative', 20, int8(-5n), '-5'],
    ['int2', 21, Buffer.from([0xff, 0xfe]), -2],
    ['int4', 23, int4(123456), 123456],
    ['oid', 26, Buffer.from([0xff, 0xff, 0xff, 0xff]), 4294967295],
    ['json', 114, utf8('{"a":[1,"x"]}'), { a: [1, 'x'] }],
    [
      'jsonb, after its version byte',
      3802,
      Buffer.concat([Buffer.from([1]), utf8('{"b":null}')]),
      { b: null },
    ],
    ['float8', 701, float8(1.5), 1.5],
    ['timestamptz', 1184, int8(MICROS), new Date(Date.UTC(2026, 11, 7, 10, 30, 0, 123))],
    ['timestamp, local fields', 1114, int8(MICROS), new Date(2026, 11, 7, 10, 30, 0, 123)],
    ['timestamptz infinity', 1184, int8(0x7fffffffffffffffn), Infinity],
    ['date, local midnight', 1082, int4(1), new Date(2000, 0, 2)],
    [
      'uuid, as its text',
      2950,
      Buffer.from('8f0c2b7e1d4a4c3e9b5f0a1b2c3d4e5f', 'hex'),
      '8f0c2b7e-1d4a-4c3e-9b5f-0a1b2c3d4e5f',
    ],
    ['text', 25, utf8('public'), 'public'],
    ['name (any other type: its text)', 19, utf8('idempotency_keys'), 'idempotency_keys'],
    ['text[]', 1009, array(25, [utf8('a'), null, utf8('ü')]), ['a', null, 'ü']],
    ['name[]', 1003, array(19, [utf8('public')]), ['public']],
    ['int8[], strings', 1016, array(20, [int8(1n), int8(-2n)]), ['1', '-2']],
    ['int4[] empty', 1007, array(23, []), []],
    ['bool[]', 1000, array(16, [Buffer.from([1])]), [true]],
  ])('%s', (_name, oid, bytes, value) => {
    expect(libraryBinaryParser(oid)(bytes)).toEqual(value);
  });
});
