import { normalizeTenantId, readTenantId } from './tenant-id.js';

describe('normalizeTenantId', () => {
  it.each<[unknown, string | undefined]>([
    // Integers, canonical as when tenant ids were a bigint column.
    [0, '0'],
    [42, '42'],
    [-7, '-7'],
    ['42', '42'],
    [12n, '12'],
    ['9223372036854775807', '9223372036854775807'],
    ['-9223372036854775808', '-9223372036854775808'],
    // Strings exactly as written: no two different ids share a key space.
    ['007', '007'],
    [' 42 ', ' 42 '],
    ['-0', '-0'],
    // Strings and UUIDs, as they are.
    ['9223372036854775808', '9223372036854775808'],
    ['12345678901234567890', '12345678901234567890'],
    ['0b6c7c2e-7d1b-4c39-9f4e-2f1d0a9b8c7d', '0b6c7c2e-7d1b-4c39-9f4e-2f1d0a9b8c7d'],
    ['acme-corp', 'acme-corp'],
    ['Ünïcode tenant', 'Ünïcode tenant'],
    ['1e3', '1e3'],
    ['x'.repeat(255), 'x'.repeat(255)],
    ['acme\ud83d\ude00', 'acme\ud83d\ude00'],
    // 255 characters as the keys table's CHECK counts them (510 UTF-16 code units).
    ['😀'.repeat(255), '😀'.repeat(255)],
    // Refused.
    ['x'.repeat(256), undefined],
    ['', undefined],
    ['   ', undefined],
    ['a\u0000b', undefined],
    ['a\nb', undefined],
    ['a\u007fb', undefined],
    // Lone surrogates: PostgreSQL would store each of these as 'acme\uFFFD', one tenant.
    ['acme\ud800', undefined],
    ['acme\udbff', undefined],
    ['acme\udc00', undefined],
    ['\ude00acme\ud83d', undefined],
    ['acme\ufffd', 'acme\ufffd'],
    [2 ** 60, undefined],
    [2n ** 64n, undefined],
    [1.5, undefined],
    [Number.NaN, undefined],
    [undefined, undefined],
    [null, undefined],
    [{}, undefined],
  ])('%p -> %p', (input, expected) => {
    expect(normalizeTenantId(input as string)).toBe(expected);
  });
});

describe('readTenantId (the rule a refused value breaks)', () => {
  it.each<[string, unknown, string]>([
    ['nothing', undefined, 'the app found none for it'],
    ['null', null, 'the app found none for it'],
    ['an object', {}, 'it is an object, not a string or an integer'],
    ['a boolean', true, 'it is a boolean, not a string or an integer'],
    ['a fraction', 1.5, 'it is a number that is not a safe integer'],
    ['NaN', Number.NaN, 'it is a number that is not a safe integer'],
    ['a bigint past 64 bits', 2n ** 64n, 'it is an integer outside the 64-bit range'],
    ['an empty string', '', 'it is empty'],
    ['only white space', ' \t ', 'it is only white space'],
    ['256 characters', 'x'.repeat(256), 'it is longer than 255 characters'],
    ['256 emoji', '😀'.repeat(256), 'it is longer than 255 characters'],
    ['a NUL', 'a\u0000b', 'it holds a control character'],
    ['a lone surrogate', 'acme\ud800', 'it holds a lone surrogate'],
    [
      'the tasks’ key space',
      'schedule:settle',
      "it begins with schedule:, the library's own key space of scheduled tasks",
    ],
    [
      'the jobs’ key space',
      'bullmq:payouts',
      "it begins with bullmq:, the library's own key space",
    ],
  ])('refuses %s: %p', (_name, value, rule) => {
    const reading = readTenantId(value);
    expect(reading.kind).toBe('invalid');
    expect(reading.kind === 'invalid' && reading.rule).toContain(rule);
  });

  it('reads an id as normalizeTenantId does', () => {
    expect(readTenantId(42)).toEqual({ kind: 'id', text: '42' });
  });
});
