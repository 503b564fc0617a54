import { previewMessageId, readMessageId } from './message-id.js';

describe('readMessageId', () => {
  it.each<[string, unknown, ReturnType<typeof readMessageId>]>([
    ['a string', 'm-1', { kind: 'id', id: 'm-1' }],
    ['an integer', 42, { kind: 'id', id: '42' }],
    ['255 characters', 'x'.repeat(255), { kind: 'id', id: 'x'.repeat(255) }],
    ['a surrogate pair (one character)', 'm-😀', { kind: 'id', id: 'm-😀' }],
    // Characters as the table's CHECK (length()) counts them, not UTF-16 code units.
    ['255 emoji (510 code units)', '😀'.repeat(255), { kind: 'id', id: '😀'.repeat(255) }],
    ['256 emoji', '😀'.repeat(256), { kind: 'unusable', reason: 'is over 255 characters' }],
    ['undefined', undefined, { kind: 'none' }],
    ['null', null, { kind: 'none' }],
    ['empty', '', { kind: 'none' }],
    ['256 characters', 'x'.repeat(256), { kind: 'unusable', reason: 'is over 255 characters' }],
    ['10 KB', 'x'.repeat(10_240), { kind: 'unusable', reason: 'is over 255 characters' }],
    ['a NUL', 'a\u0000b', { kind: 'unusable', reason: 'holds a NUL character' }],
    ['only a NUL', '\u0000', { kind: 'unusable', reason: 'holds a NUL character' }],
    [
      'a lone high surrogate',
      'a\ud800b',
      { kind: 'unusable', reason: 'holds a lone surrogate (not Unicode)' },
    ],
    [
      'a lone low surrogate at the start',
      '\udc00b',
      { kind: 'unusable', reason: 'holds a lone surrogate (not Unicode)' },
    ],
    [
      'a high surrogate at the end',
      'ab\ud83d',
      { kind: 'unusable', reason: 'holds a lone surrogate (not Unicode)' },
    ],
    ['a fraction', 1.5, { kind: 'unusable', reason: 'is a number but not a safe integer' }],
    ['an object', {}, { kind: 'unusable', reason: 'is a object, not a string or an integer' }],
  ])('%s', (_name, value, expected) => {
    expect(readMessageId(value)).toEqual(expected);
  });
});

describe('previewMessageId', () => {
  it.each<[string, unknown, string]>([
    ['quoted', 'm-1', '"m-1"'],
    ['a NUL escaped', 'a\u0000b', '"a\\u0000b"'],
    ['a lone surrogate escaped', 'a\ud800', '"a\\ud800"'],
    ['cut at 60', 'x'.repeat(100), `"${'x'.repeat(59)}…`],
    ['cut at 60 characters, never inside a pair', `${'x'.repeat(58)}😀😀`, `"${'x'.repeat(58)}😀…`],
    ['not JSON', 10n, '10'],
  ])('%s', (_name, value, expected) => {
    expect(previewMessageId(value)).toBe(expected);
  });
});
