import { type AliasErrorCandidate, aliasErrorChoice } from './alias-error-choice.js';

describe('aliasErrorChoice', () => {
  const email: AliasErrorCandidate = { step: 'email', own: true };
  const age: AliasErrorCandidate = { step: 'age', own: false };
  const cases: [string, string[], AliasErrorCandidate[], number | undefined][] = [
    ['the alias selecting email: the email error', ['phone', 'email'], [email, age], 0],
    [
      'the alias selecting age, in the first group: the age error',
      ['phone', 'age'],
      [email, age],
      1,
    ],
    ['selecting neither: its own group', ['phone'], [email, age], 0],
    [
      'selecting neither, no own group: none',
      ['phone'],
      [{ ...email, own: false }, age],
      undefined,
    ],
    ['selecting both: the first in its selection, email', ['email', 'age'], [email, age], 0],
    [
      'selecting both, age first (a merged alias): the age error, as GraphQL answers',
      ['phone', 'age', 'email'],
      [email, age],
      1,
    ],
    [
      'a step by its alias in the selection order',
      ['phone', 'years', 'age', 'email'],
      [email, { step: 'years', own: false }],
      1,
    ],
    ['an item index as the step: its own group', ['phone'], [{ step: 0, own: true }], 0],
    ['no candidates: none', ['email'], [], undefined],
  ];
  it.each(cases)('%s', (_name, selected, candidates, expected) => {
    expect(aliasErrorChoice(selected, candidates)).toBe(expected);
  });
});
