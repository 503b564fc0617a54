import { parseIdempotencyKey } from './idempotency-key.js';

describe('parseIdempotencyKey', () => {
  it.each([
    ['abc', 'abc'],
    ['"abc"', 'abc'],
    ['  abc  ', 'abc'],
    ['8e03978e-40d5-43e8-bc93-6894a57f9324', '8e03978e-40d5-43e8-bc93-6894a57f9324'],
    ['"a\\"b"', 'a"b'],
    ['"a\\\\b"', 'a\\b'],
    ['a"b', 'a"b'],
    ['"', '"'],
    ['x'.repeat(255), 'x'.repeat(255)],
    [`"${'x'.repeat(255)}"`, 'x'.repeat(255)],
    ['!~', '!~'],
    [['only-one'], 'only-one'],
  ])('accepts %j as key %j', (header, key) => {
    expect(parseIdempotencyKey(header)).toEqual({ kind: 'key', key });
  });

  it('reports a missing header', () => {
    expect(parseIdempotencyKey(undefined)).toEqual({ kind: 'missing' });
  });

  it.each([
    ['', 'it is empty'],
    ['   ', 'it is empty'],
    ['""', 'it is empty'],
    ['x'.repeat(256), 'it is longer than 255 characters'],
    [`"${'x'.repeat(256)}"`, 'it is longer than 255 characters'],
    // 128 characters (256 UTF-16 code units): not too long, only not ASCII.
    ['😀'.repeat(128), 'it must be visible ASCII characters only (no spaces)'],
    ['a b', 'it must be visible ASCII characters only (no spaces)'],
    ['"a b"', 'it must be visible ASCII characters only (no spaces)'],
    ['caf\u00e9', 'it must be visible ASCII characters only (no spaces)'],
    ['a\tb', 'it must be visible ASCII characters only (no spaces)'],
    ['"a"b"', 'it is not a valid quoted string'],
    ['"a\\b"', 'it is not a valid quoted string'],
    ['"a\\"', 'it is not a valid quoted string'],
    [['k1', 'k2'], 'it was sent more than once'],
    // A key from a JSON body may hold what no header can: "k\ud800" parses to a lone surrogate.
    ['k\ud800', 'it holds a lone surrogate (not Unicode)'],
    ['k\udbff', 'it holds a lone surrogate (not Unicode)'],
    ['\udc00k', 'it holds a lone surrogate (not Unicode)'],
    ['"k\ud800"', 'it holds a lone surrogate (not Unicode)'],
    ['k\ud83d\ude00', 'it must be visible ASCII characters only (no spaces)'],
  ])('rejects %j: %s', (header, reason) => {
    expect(parseIdempotencyKey(header)).toEqual({ kind: 'invalid', reason });
  });
});
