import { binaryProbeMisread } from './binary-results.js';

describe('binaryProbeMisread', () => {
  it.each([
    ['bytes kept', { n: 1000, b: Buffer.from('80ff007f', 'hex') }, undefined],
    [
      'pg 8 decoding as UTF-8',
      { n: 1007, b: Buffer.from('efbfbdefbfbd007f', 'hex') },
      '1000::int4 read back as 1007, bytea \\x80ff007f as \\xefbfbdefbfbd007f',
    ],
    [
      'int right, bytes replaced',
      { n: 1000, b: Buffer.from('efbfbd', 'hex') },
      '1000::int4 read back as 1000, bytea \\x80ff007f as \\xefbfbd',
    ],
    ['no row', undefined, '1000::int4 read back as undefined, bytea \\x80ff007f as undefined'],
    [
      'a text where bytes are due',
      { n: 1000, b: '\\x80ff007f' },
      '1000::int4 read back as 1000, bytea \\x80ff007f as \\x\\x80ff007f',
    ],
  ])('%s', (_name, row, expected) => {
    expect(binaryProbeMisread(row)).toBe(expected);
  });
});
