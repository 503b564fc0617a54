import {
  characterCount,
  firstCharacters,
  isWellFormedText,
  longerThan,
  unstorableTextProblem,
} from './well-formed.js';

describe('characterCount: as PostgreSQL length() counts', () => {
  it.each([
    ['empty', '', 0],
    ['ASCII', 'parcels', 7],
    ['Latin with accents (one unit each)', 'café', 4],
    ['an emoji (two code units)', '📦', 1],
    ['130 emoji and -a', '📦'.repeat(130) + '-a', 132],
    ['a CJK Extension B ideograph', '𠀀x', 2],
    ['a lone high surrogate', 'a\ud800', 2],
    ['a lone low surrogate before a pair', '\udc00📦', 2],
  ])('%s', (_name, text, count) => {
    expect(characterCount(text)).toBe(count);
    if (isWellFormedText(text)) expect(characterCount(text)).toBe([...text].length);
  });
});

describe('firstCharacters: never cuts a surrogate pair', () => {
  it.each([
    ['shorter than the limit', 'abc', 40, 'abc'],
    ['ASCII cut', 'abcdef', 3, 'abc'],
    ['emoji counted as one each', '📦📦📦', 2, '📦📦'],
    ['a cut that would fall inside a pair', 'a📦b', 2, 'a📦'],
    ['zero', '📦', 0, ''],
  ])('%s', (_name, text, max, first) => {
    expect(firstCharacters(text, max)).toBe(first);
    expect(isWellFormedText(firstCharacters(text, max))).toBe(true);
  });
});

describe('unstorableTextProblem', () => {
  it.each([
    ['plain text', 'bullmq:mail-eu', undefined],
    ['emoji', 'bullmq:📦', undefined],
    ['a NUL', 'bullmq:mail\u0000eu', 'holds a NUL character'],
    ['a NUL and a lone surrogate', '\ud800\u0000', 'holds a NUL character'],
    ['a lone surrogate', 'bullmq:mail\ud800', 'holds a lone surrogate (not Unicode)'],
    ['a pair cut in two', '📦'.slice(0, 1), 'holds a lone surrogate (not Unicode)'],
  ])('%s', (_name, text, problem) => {
    expect(unstorableTextProblem(text)).toBe(problem);
  });
});

describe('longerThan: over max characters, as characterCount says', () => {
  it.each([
    ['255 ASCII', 'x'.repeat(255), 255, false],
    ['256 ASCII', 'x'.repeat(256), 255, true],
    ['255 emoji (510 code units)', '😀'.repeat(255), 255, false],
    ['256 emoji', '😀'.repeat(256), 255, true],
    ['10 KB', 'x'.repeat(10_240), 255, true],
    ['empty', '', 0, false],
  ])('%s', (_name, text, max, longer) => {
    expect(longerThan(text, max)).toBe(longer);
    expect(longerThan(text, max)).toBe(characterCount(text) > max);
  });
});
