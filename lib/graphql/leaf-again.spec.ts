import { leafAgain, type LeafScalar } from './leaf-again.js';

describe('leafAgain', () => {
  const phone: LeafScalar = {
    serialize: (value) => String(value),
    parseValue: (value) => String(value).replace(/[^+\d]/g, ''),
  };
  const date: LeafScalar = {
    serialize: (value) => {
      if (!(value instanceof Date)) throw new TypeError('not a Date');
      return value.toISOString();
    },
    parseValue: (value) => new Date(String(value)),
  };
  const refusing: LeafScalar = {
    serialize: (value) => value,
    parseValue: () => {
      throw new TypeError('no input');
    },
  };
  const upper: LeafScalar = {
    serialize: (value) => String(value).toUpperCase(),
    parseValue: (value) => String(value).toLowerCase(),
  };
  const iso = '2026-12-06T00:00:00.000Z';
  const cases: [string, LeafScalar, unknown, unknown][] = [
    ['parseValue() written as it was: parsed', phone, '+15550109999', '+15550109999'],
    [
      'a normalizing parseValue(): the stored form',
      phone,
      '+1 (555) 010-9999',
      '+1 (555) 010-9999',
    ],
    ['a Date scalar refusing a string: parsed', date, iso, new Date(iso)],
    ['parseValue() refuses: the stored form', refusing, 'x', 'x'],
    ['neither written as it was: parsed, as before', upper, 'Ab', 'ab'],
    ['written as it is through either: parsed', upper, 'AB', 'ab'],
  ];
  it.each(cases)('%s', (_name, scalar, wire, expected) => {
    expect(leafAgain(scalar, wire)).toEqual(expected);
  });
});
