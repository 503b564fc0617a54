import { normalizeTenantId } from './tenant-id.js';

describe('normalizeTenantId', () => {
  it.each<[unknown, string | undefined]>([
    [0, '0'],
    [42, '42'],
    [-7, '-7'],
    ['42', '42'],
    [' 42 ', '42'],
    ['007', '7'],
    [12n, '12'],
    ['9223372036854775807', '9223372036854775807'],
    ['-9223372036854775808', '-9223372036854775808'],
    ['9223372036854775808', undefined],
    [2 ** 60, undefined],
    [1.5, undefined],
    [Number.NaN, undefined],
    ['', undefined],
    ['abc', undefined],
    ['1e3', undefined],
    ['12345678901234567890', undefined],
    [undefined, undefined],
    [null, undefined],
    [{}, undefined],
  ])('%p -> %p', (input, expected) => {
    expect(normalizeTenantId(input as string)).toBe(expected);
  });
});
