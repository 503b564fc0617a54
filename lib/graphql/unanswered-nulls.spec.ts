import { isAtOrUnder } from './output-paths.js';
import { unansweredNulls } from './unanswered-nulls.js';

describe('unansweredNulls', () => {
  const cases: [string, string[], string[], string[]][] = [
    ['no nulls: none', [], ['grade'], []],
    ['a null with its error: none', ['grade'], ['grade'], []],
    ['a null with an error under it: none', ['customer'], ['customer.contact.email'], []],
    ['a null without one (an aggregate under Mercurius): it', ['grade'], [], ['grade']],
    ['an error elsewhere: it still', ['grade'], ['score'], ['grade']],
    [
      'an error above it does not answer it',
      ['customer.contact'],
      ['customer'],
      ['customer.contact'],
    ],
  ];
  it.each(cases)('%s', (_name, nulls, errorKeys, expected) => {
    expect(unansweredNulls(nulls, errorKeys, isAtOrUnder)).toEqual(expected);
  });
});
