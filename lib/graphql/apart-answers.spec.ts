import { answerApart, answeredApart, answersApart } from './apart-answers.js';

describe('answersApart', () => {
  type Told = Parameters<typeof answersApart>[0];
  const all: Told = { kept: true, resolution: 'property', composite: true, keptProperty: true };
  const cases: [
    string,
    Partial<typeof all> & { resolution?: 'property' | 'middleware' | 'app' },
    boolean,
  ][] = [
    ['a kept parent, an object field it kept: apart', {}, true],
    ['a parent not kept: the answer at the property', { kept: false }, false],
    ['the property not in its kept data: the answer at it', { keptProperty: false }, false],
    ['a leaf: kept-member.ts tells', { composite: false }, false],
    ['behind middleware: its stored output', { resolution: 'middleware' }, false],
    ["the app's: computed", { resolution: 'app' }, false],
  ];
  it.each(cases)('%s', (_name, told, expected) => {
    expect(answersApart({ ...all, ...told })).toBe(expected);
  });
});

describe('answerApart / answeredApart', () => {
  it('answers the field of that parent only', () => {
    const parent = { contact: { phone: '555' } };
    const error = new Error('gone');
    answerApart(parent, 'contact', error);
    expect(answeredApart(parent, 'contact')).toEqual({ value: error });
    expect(answeredApart(parent, 'name')).toBeUndefined();
    expect(answeredApart({ ...parent }, 'contact')).toBeUndefined();
    expect(answeredApart(null, 'contact')).toBeUndefined();
  });
});
