import { storableText } from './storable-text.js';

describe('storableText', () => {
  it.each<[string, string, number, string]>([
    ['as it is', 'Error: no', 1000, 'Error: no'],
    ['a NUL written out', 'bad\u0000byte', 1000, 'bad\\u0000byte'],
    ['every NUL', '\u0000\u0000', 1000, '\\u0000\\u0000'],
    ['a lone surrogate replaced', 'half \ud800 pair', 1000, 'half \ufffd pair'],
    ['a lone low surrogate replaced', '\udc00x', 1000, '\ufffdx'],
    ['a pair kept', 'ok 😀', 1000, 'ok 😀'],
    ['exactly the bound', 'x'.repeat(10), 10, 'x'.repeat(10)],
    ['cut, with a mark', 'x'.repeat(10_240), 10, `${'x'.repeat(9)}…`],
    ['never cut inside a pair', `${'x'.repeat(8)}😀`, 9, `${'x'.repeat(8)}…`],
    ['a NUL written out, then cut', '\u0000'.repeat(5), 10, '\\u0000\\u0…'],
  ])('%s', (_name, text, max, expected) => {
    expect(storableText(text, max)).toBe(expected);
  });
});
