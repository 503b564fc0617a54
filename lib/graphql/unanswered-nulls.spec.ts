import { isAtOrUnder } from './output-paths.js';
import { type NullPlace, nullKeyOf, unansweredNulls } from './unanswered-nulls.js';

describe('unansweredNulls', () => {
  /** A field that is null itself. */
  const own = (key: string): NullPlace => ({ key, nulledAt: key });
  const cases: [string, NullPlace[], string[], string[]][] = [
    ['no nulls: none', [], ['grade'], []],
    ['a null with its error: none', [own('grade')], ['grade'], []],
    ['a null with an error under it: none', [own('customer')], ['customer.contact.email'], []],
    ['a null without one (an aggregate under Mercurius): it', [own('grade')], [], ['grade']],
    ['an error elsewhere: it still', [own('grade')], ['score'], ['grade']],
    [
      'an error above it does not answer it',
      [own('customer.contact')],
      ['customer'],
      ['customer.contact'],
    ],
    [
      'under a null parent (a non-null field), no error there: it (Mercurius aggregate)',
      [{ key: 'thing.level', nulledAt: 'thing' }],
      [],
      ['thing.level'],
    ],
    [
      'under a null parent with its own error: none',
      [{ key: 'thing.level', nulledAt: 'thing' }],
      ['thing.level'],
      [],
    ],
    [
      "under a null parent a sibling's error nulled: none (its own never reached the answer)",
      [{ key: 'thing.level', nulledAt: 'thing' }],
      ['thing.id'],
      [],
    ],
    [
      'under a null parent, an error at the parent itself: none',
      [{ key: 'thing.level', nulledAt: 'thing' }],
      ['thing'],
      [],
    ],
    [
      'under a null parent, an error elsewhere: it',
      [{ key: 'thing.level', nulledAt: 'thing' }],
      ['other.level'],
      ['thing.level'],
    ],
    [
      "under the mutation's own null, no error under it: it (adversary 96)",
      [{ key: 'thing.level', nulledAt: '' }],
      [],
      ['thing.level'],
    ],
    [
      "under the mutation's own null, a sibling's error: none",
      [{ key: 'thing.level', nulledAt: '' }],
      ['id'],
      [],
    ],
    [
      "under the mutation's own null, an error at the mutation's field: none",
      [{ key: 'thing.level', nulledAt: '' }],
      [''],
      [],
    ],
  ];
  it.each(cases)('%s', (_name, nulls, errorKeys, expected) => {
    expect(unansweredNulls(nulls, errorKeys, isAtOrUnder)).toEqual(expected);
  });
});

describe('nullKeyOf', () => {
  const path = ['box', 'thing', 'level'];
  const cases: [string, number, (string | number)[], number | undefined, string | undefined][] = [
    ['no null above it: none', 1, path, undefined, undefined],
    ['the whole data null (above the mutation): none', 1, path, 0, undefined],
    ["the mutation's field itself: ''", 1, path, 1, ''],
    ['a parent under the mutation: its key', 1, path, 2, 'thing'],
    ['an item of a list under it', 1, ['box', 'things', 0, 'level'], 3, 'things.0'],
    ['a mutation under an alias path deeper', 2, ['a', 'box', 'thing', 'level'], 2, ''],
    ['past the path: none', 1, path, 4, undefined],
  ];
  it.each(cases)('%s', (_name, rootLength, at, end, expected) => {
    expect(nullKeyOf(rootLength, at, end)).toBe(expected);
  });
});
