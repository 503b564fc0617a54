import { phaseResultsRead, phaseResultText } from './phase-result-json.js';

const cases: [string, unknown][] = [
  ['a plain object', { id: 'ch_1', amount: 1200 }],
  ['null', null],
  ['a string cut inside an emoji', { description: 'coffee and \ud83c' }],
  ['a lone low surrogate', ['\udf70 cake']],
  ['a NUL', { note: 'a\u0000b' }],
  ['a NUL in a key', { 'a\u0000': 1 }],
  ['a backslash and u0000 written out', { note: 'C:\\u0000\\ud83c' }],
  ['a whole emoji', { note: 'coffee and 🍰' }],
  ['a value shaped like the wrapper', { $idempotencyJsonText: '{"a":1}' }],
  ['a wrapper-shaped value holding a NUL', { $idempotencyJsonText: '\u0000' }],
  ['other control characters', { note: '\u0001\u001f' }],
];

describe('phaseResultText and phaseResultsRead', () => {
  it.each(cases)('%s: read back as it was', (_name, value) => {
    const text = phaseResultText(value);
    expect(phaseResultsRead({ p: JSON.parse(text) })).toEqual({ p: value });
  });

  it.each(cases)('%s: what jsonb refuses never reaches it', (_name, value) => {
    // jsonb refuses the escapes \u0000 and \ud800-\udfff; a wrapped text holds them escaped.
    expect(phaseResultText(value)).not.toMatch(/(?:^|[^\\])(?:\\\\)*\\u(?:0000|d[89a-f])/i);
  });

  it('reads back a phase named __proto__ as its own result', () => {
    const stored = JSON.parse('{"__proto__": {"id": 1}, "psp": null}') as Record<string, unknown>;
    const read = phaseResultsRead(stored);
    expect(Object.prototype.hasOwnProperty.call(read, '__proto__')).toBe(true);
    expect(Object.getPrototypeOf(read)).toBe(Object.prototype);
    expect(Object.keys(read)).toEqual(['__proto__', 'psp']);
  });

  it('stores a result jsonb holds as its own JSON, unwrapped', () => {
    expect(phaseResultText({ id: 'ch_1' })).toBe('{"id":"ch_1"}');
    expect(phaseResultText(undefined)).toBe('null');
  });
});
