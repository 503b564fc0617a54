import { isAtOrUnder } from './output-paths.js';
import { type NullPlace, unansweredNulls } from './unanswered-nulls.js';

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
  ];
  it.each(cases)('%s', (_name, nulls, errorKeys, expected) => {
    expect(unansweredNulls(nulls, errorKeys, isAtOrUnder)).toEqual(expected);
  });
});
