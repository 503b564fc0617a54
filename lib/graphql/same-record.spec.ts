import { defineOwn, defineOwnSymbol } from './own-member.js';
import { recordOnce, sameRecord } from './same-record.js';

/** A record as a walk builds one: each member defined as its own data, in order. */
function record(members: [string | symbol, unknown][]): Record<string, unknown> {
  const built: Record<string, unknown> = {};
  for (const [key, value] of members) {
    if (typeof key === 'symbol') defineOwnSymbol(built, key, value);
    else defineOwn(built, key, value);
  }
  return built;
}

describe('sameRecord', () => {
  const order = { id: 1 };
  const tag = Symbol.for('audit');
  const cases: [string, [string | symbol, unknown][], [string | symbol, unknown][], boolean][] = [
    [
      'the same members, the same values',
      [
        ['a', 1],
        ['b', 'x'],
      ],
      [
        ['a', 1],
        ['b', 'x'],
      ],
      true,
    ],
    ['both empty', [], [], true],
    ['one object inside both: the one object', [['order', order]], [['order', order]], true],
    [
      'equal objects that are two: not the same',
      [['order', { id: 1 }]],
      [['order', { id: 1 }]],
      false,
    ],
    [
      'a member more',
      [['a', 1]],
      [
        ['a', 1],
        ['b', 2],
      ],
      false,
    ],
    [
      'the same members in another order (a replay keeps the order)',
      [
        ['a', 1],
        ['b', 2],
      ],
      [
        ['b', 2],
        ['a', 1],
      ],
      false,
    ],
    ['a value that differs', [['a', 1]], [['a', 2]], false],
    [
      'undefined (a defaultValue filled in) against no member',
      [['a', undefined]],
      [['b', undefined]],
      false,
    ],
    ['NaN is NaN', [['a', NaN]], [['a', NaN]], true],
    ['-0 is not 0', [['a', -0]], [['a', 0]], false],
    ['under the same registered symbol', [[tag, 1]], [[tag, 1]], true],
    ['a symbol against none', [[tag, 1]], [], false],
  ];
  it.each(cases)('%s', (_name, a, b, same) => {
    expect(sameRecord(record(a), record(b))).toBe(same);
    expect(sameRecord(record(b), record(a))).toBe(same);
  });

  it('never calls an accessor the same as data', () => {
    const withGetter = Object.defineProperty({}, 'a', { get: () => 1, enumerable: true });
    expect(sameRecord(withGetter, record([['a', 1]]))).toBe(false);
  });
});

describe('recordOnce', () => {
  it('gives a later place of one object the earlier record that holds the same', () => {
    const known = new WeakMap<object, Record<string, unknown>[]>();
    const product = { id: 7 };
    const first = record([['description', 'd']]);
    const second = record([['description', 'd']]);
    const other = record([['description', 'e']]);
    expect(recordOnce(known, product, first)).toBe(first);
    expect(recordOnce(known, product, second)).toBe(first);
    // A record that differs (another selection) stays its own, and is found again after.
    expect(recordOnce(known, product, other)).toBe(other);
    expect(recordOnce(known, product, record([['description', 'e']]))).toBe(other);
  });

  it("never gives one object's record for another's, however alike", () => {
    const known = new WeakMap<object, Record<string, unknown>[]>();
    const first = record([['name', 'Widget']]);
    const second = record([['name', 'Widget']]);
    expect(recordOnce(known, { id: 1 }, first)).toBe(first);
    expect(recordOnce(known, { id: 1 }, second)).toBe(second);
  });
});
