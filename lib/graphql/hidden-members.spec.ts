import { hiddenKey, keptMember, type KeptMember, readMemberKey } from './hidden-members.js';

describe('keptMember', () => {
  const getter = { get: () => 1, configurable: true };
  it.each<[string, PropertyDescriptor, boolean, KeptMember]>([
    ['enumerable data', { value: 1, enumerable: true, writable: true }, true, 'member'],
    ['enumerable data, hidden not kept', { value: 1, enumerable: true }, false, 'member'],
    [
      'an own enumerable getter (read as JSON reads it)',
      { ...getter, enumerable: true },
      true,
      'member',
    ],
    ['hidden data (a back-reference out of JSON)', { value: 1, enumerable: false }, true, 'hidden'],
    ['hidden data where hidden is not kept (an array length)', { value: 3 }, false, 'none'],
    ['a hidden getter (computed, may throw)', { ...getter, enumerable: false }, true, 'none'],
    ['a hidden setter alone', { set: () => undefined, enumerable: false }, true, 'none'],
  ])('%s', (_what, descriptor, hidden, expected) => {
    expect(keptMember(descriptor, hidden)).toBe(expected);
  });
});

describe('hiddenKey and readMemberKey', () => {
  it.each<[string, unknown, { written: unknown; enumerable: boolean; writable: boolean }]>([
    ['a plain key', 'id', { written: 'id', enumerable: true, writable: true }],
    ['a registered symbol', ['y', 's'], { written: ['y', 's'], enumerable: true, writable: true }],
    [
      'a hidden read-only key',
      hiddenKey('order', false),
      { written: 'order', enumerable: false, writable: false },
    ],
    [
      'a hidden writable key',
      hiddenKey('order', true),
      { written: 'order', enumerable: false, writable: true },
    ],
    [
      'a hidden registered symbol',
      hiddenKey(['y', 's'], true),
      { written: ['y', 's'], enumerable: false, writable: true },
    ],
  ])('%s', (_what, written, expected) => {
    expect(readMemberKey(written)).toEqual(expected);
  });
});
