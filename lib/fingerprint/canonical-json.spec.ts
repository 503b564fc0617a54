import { canonicalizeJsonText, canonicalizeValue, InvalidJsonError } from './canonical-json.js';

const nested = (depth: number): string => '['.repeat(depth) + ']'.repeat(depth);

const nestedValue = (depth: number): unknown => {
  let value: unknown = [];
  for (let i = 1; i < depth; i++) value = [value];
  return value;
};

describe('canonicalizeJsonText', () => {
  it.each<[string, string, string]>([
    ['integer', '1', '1e0'],
    ['integer with fraction zeros', '1.0', '1e0'],
    ['trailing integer zeros', '100', '1e2'],
    ['negative decimal', '-12.50', '-125e-1'],
    ['small decimal', '0.001', '1e-3'],
    ['zero', '0', '0'],
    ['negative zero', '-0', '0'],
    ['big integer', '12345678901234567890', '1234567890123456789e1'],
    ['huge exponent', '1e999999999999', '1e999999999999'],
    ['exponent beyond doubles', '-2.5E+99999999999999999999', '-25e99999999999999999998'],
    ['literals', '[true,false,null]', '[true,false,null]'],
    ['empty containers', ' { "a" : [ ] , "b" : { } } ', '{"a":[],"b":{}}'],
    [
      'sorted keys',
      '{"b":[1,{"d":true,"c":null}],"a":"x"}',
      '{"a":"x","b":[1e0,{"c":null,"d":true}]}',
    ],
    [
      'keys by UTF-16 code unit',
      '{"\\uff46":1,"\\ud83d\\ude00":2}',
      '{"\ud83d\ude00":2e0,"\uff46":1e0}',
    ],
    ['keys case-sensitive', '{"b":1,"a":2,"B":3}', '{"B":3e0,"a":2e0,"b":1e0}'],
    ['string escapes re-encoded', '"\\u0041\\/\\u000a\\t"', '"A/\\n\\t"'],
    ['control character escape kept', '"\\u0000"', '"\\u0000"'],
    ['lone surrogate kept', '"\\ud800"', '"\\ud800"'],
  ])('writes %s canonically', (_name, input, expected) => {
    expect(canonicalizeJsonText(input)).toBe(expected);
  });

  it.each<[string, string, string]>([
    ['top-level key order', '{"a":1,"b":2}', '{"b":2,"a":1}'],
    [
      'key order at every depth',
      '{"x":{"a":1,"b":[{"c":1,"d":{"e":1,"f":2}}]},"y":0}',
      '{"y":0,"x":{"b":[{"d":{"f":2,"e":1},"c":1}],"a":1}}',
    ],
    ['objects inside arrays', '[{"a":1,"b":2},[{"c":3,"d":4}]]', '[{"b":2,"a":1},[{"d":4,"c":3}]]'],
    ['white space', ' \t\n\r{ "a" : [ 1 , 2 , { "b" : null } ] }\r\n', '{"a":[1,2,{"b":null}]}'],
    ['1 and 1.0', '1', '1.0'],
    ['1 and 1e0', '1', '1e0'],
    ['1 and 10e-1', '1', '10e-1'],
    ['1 and 0.1e1', '1', '0.1e1'],
    ['1 and 1E+0', '1', '1E+0'],
    ['1 and 100e-2', '1', '100e-2'],
    ['1 and 1e-0', '1', '1e-0'],
    ['100 and 1e2', '100', '1e2'],
    ['exponent leading zeros', '1e007', '1e7'],
    ['0.001 and 1e-3', '0.001', '1e-3'],
    ['-0 and 0', '-0', '0'],
    ['0.0 and 0', '0.0', '0'],
    ['0e10 and 0', '0e10', '0'],
    ['-0.0 and 0', '-0.0', '0'],
    ['zero with huge exponent', '0E-999999999999999999999', '0'],
    ['zero inside structures', '{"a":[-0,0.000]}', '{"a":[0e5,-0E-3]}'],
    ['negative decimals', '-1.5', '-15e-1'],
    ['negative fraction', '-0.5', '-5E-1'],
    ['big integer spellings', '12345678901234567890', '1234567890123456789.0e1'],
    ['big integer with fraction zeros', '-98765432109876543210', '-98765432109876543210.000'],
    ['long fraction', '0.12345678901234567890123', '12345678901234567890123e-23'],
    ['huge exponents', '1e999999999999', '10e999999999998'],
    ['huge exponent across arithmetic paths', '1e1000000000000000', '100e999999999999998'],
    ['tiny exponents', '1e-99999999999999999999', '0.1e-99999999999999999998'],
    ['\\u escape and literal', '"\\u0041"', '"A"'],
    ['lower- and upper-case hex escapes', '"\\u00e9"', '"\\u00E9"'],
    ['escaped and literal non-ASCII', '"\\u00e9"', '"\u00e9"'],
    ['surrogate-pair escape and literal emoji', '"\\ud83d\\ude00"', '"\ud83d\ude00"'],
    ['escaped solidus', '"a\\/b"', '"a/b"'],
    ['short and \\u escapes', '"\\n\\t\\"\\\\"', '"\\u000a\\u0009\\u0022\\u005c"'],
    ['escaped keys', '{"\\u0061":1,"\\ud83d\\ude00":2}', '{"\ud83d\ude00":2,"a":1}'],
  ])('treats %s as the same request', (_name, a, b) => {
    expect(canonicalizeJsonText(a)).toBe(canonicalizeJsonText(b));
  });

  it.each<[string, string, string]>([
    ['big integers differing in the last digit', '12345678901234567890', '12345678901234567891'],
    ['long fractions differing in the last digit', '0.10000000000000000001', '0.1'],
    ['huge exponents differing by one', '1e999999999999', '1e999999999998'],
    ['array order', '[1,2]', '[2,1]'],
    ['string and number', '"1"', '1'],
    ['string and boolean', '"true"', 'true'],
    ['string and null', '"null"', 'null'],
    ['zero and false', '0', 'false'],
    ['null member and missing key', '{"a":null}', '{}'],
    ['empty array and empty object', '[]', '{}'],
    ['nesting level', '[[1]]', '[1]'],
    ['sign', '1', '-1'],
    ['decimal position', '0.1', '0.01'],
    ['key case', '{"a":1}', '{"A":1}'],
    ['string white space', '"a b"', '"ab"'],
  ])('treats %s as different requests', (_name, a, b) => {
    expect(canonicalizeJsonText(a)).not.toBe(canonicalizeJsonText(b));
  });

  it.each<[string, string]>([
    ['empty input', ''],
    ['white space only', ' \n\t '],
    ['trailing comma in array', '[1,2,]'],
    ['trailing comma in object', '{"a":1,}'],
    ['leading comma', '[,1]'],
    ['missing comma', '[1 2]'],
    ['missing colon', '{"a" 1}'],
    ['unquoted key', '{a:1}'],
    ['number key', '{1:1}'],
    ['leading zero', '01'],
    ['negative leading zero', '-01'],
    ['no fraction digits', '1.'],
    ['no integer digits', '.5'],
    ['plus sign', '+1'],
    ['lone minus', '-'],
    ['no exponent digits', '1e'],
    ['signed exponent without digits', '1e+'],
    ['hexadecimal', '0x10'],
    ['NaN', 'NaN'],
    ['Infinity', 'Infinity'],
    ['-Infinity', '-Infinity'],
    ['unterminated string', '"abc'],
    ['unterminated string ending in backslash', '"abc\\'],
    ['raw line feed in string', '"a\nb"'],
    ['raw tab in string', '"a\tb"'],
    ['raw NUL in string', '"\u0000"'],
    ['bad escape', '"\\x41"'],
    ['upper-case U escape', '"\\U0041"'],
    ['short \\u escape', '"\\u12"'],
    ['non-hex \\u escape', '"\\u12G4"'],
    ['single quotes', "'a'"],
    ['block comment', '/* c */ 1'],
    ['line comment', '// c\n1'],
    ['truncated literal', 'tru'],
    ['capitalised literal', 'True'],
    ['byte order mark', '\ufeff1'],
    ['two values', '1 2'],
    ['data after object', '{}x'],
    ['unclosed array', '[1'],
    ['unclosed object', '{"a":1'],
    ['duplicate key', '{"a":1,"a":2}'],
    ['duplicate key spelled differently', '{"a":1,"\\u0061":1}'],
    ['nested duplicate key', '[{"x":{"b":1,"c":2,"b":3}}]'],
    ['depth 513', nested(513)],
    ['depth 600', nested(600)],
    ['depth 600 of objects', '{"a":'.repeat(600) + '1' + '}'.repeat(600)],
  ])('rejects %s', (_name, input) => {
    expect(() => canonicalizeJsonText(input)).toThrow(InvalidJsonError);
  });

  it.each<[string, number]>([
    ['', 0],
    ['[1,2,]', 5],
    ['01', 1],
    ['1.', 2],
    ['"abc', 0],
    ['"a\\x"', 2],
    ['{"a":1,"a":2}', 7],
    ['{"b":1,"a":2,"b":3}', 13],
    [' 1 x', 3],
    [nested(513), 512],
  ])('reports the position of the error in %j', (input, position) => {
    let error: unknown;
    try {
      canonicalizeJsonText(input);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(InvalidJsonError);
    expect(error).toBeInstanceOf(Error);
    expect((error as InvalidJsonError).name).toBe('InvalidJsonError');
    expect((error as InvalidJsonError).position).toBe(position);
  });

  it('accepts nesting of exactly 512 levels', () => {
    expect(canonicalizeJsonText(nested(512))).toBe(nested(512));
  });
});

describe('canonicalizeValue', () => {
  const date = new Date('2024-05-06T07:08:09.010Z');

  it.each<[string, unknown]>([
    ['integer', 1],
    ['negative decimal', -12.5],
    ['small decimal', 0.001],
    ['tiny double', 5e-324],
    ['large double', 1e21],
    ['largest double', Number.MAX_VALUE],
    ['max safe integer', Number.MAX_SAFE_INTEGER],
    ['min safe integer', Number.MIN_SAFE_INTEGER],
    ['inexact decimal', 0.1 + 0.2],
    ['negative zero', -0],
    ['string', 'hello'],
    ['unicode string', 'caf\u00e9 \ud83d\ude00 \u0000 "quoted" \\'],
    ['lone surrogate', '\udc00'],
    ['true', true],
    ['false', false],
    ['null', null],
    ['empty array', []],
    ['empty object', {}],
    ['unsorted object', { b: 2, a: 1, B: 0, '\uff46': 3, '\ud83d\ude00': 4 }],
    ['nested structure', { z: [1, { y: null, x: [true, 'a'] }], a: { c: 1.5, b: -0 } }],
    ['undefined member', { a: undefined, b: 1 }],
    ['function member', { a: () => 1, b: 1 }],
    ['undefined array element', [1, undefined, 3]],
    // eslint-disable-next-line no-sparse-arrays -- a hole, as a parsed body never has one
    ['sparse array', [1, , 3]],
    ['Date', { at: date }],
    ['custom toJSON', { toJSON: () => ({ b: 1, a: 2 }) }],
    ['boxed primitives', [Object(1.5), Object('s'), Object(false)]],
    ['numeric keys', { 10: 'a', 9: 'b', '-1': 'c' }],
    ['nesting of 512 levels', nestedValue(512)],
  ])('agrees with canonicalizeJsonText(JSON.stringify(v)) for %s', (_name, value) => {
    expect(canonicalizeValue(value)).toBe(canonicalizeJsonText(JSON.stringify(value)));
  });

  it.each<[string, unknown, string]>([
    ['integer', 1, '1e0'],
    ['negative zero', -0, '0'],
    ['decimal', -12.5, '-125e-1'],
    ['large double', 1e21, '1e21'],
    ['tiny double', 5e-324, '5e-324'],
    ['bigint', 12345678901234567890n, '1234567890123456789e1'],
    ['negative bigint', -5n, '-5e0'],
    ['zero bigint', 0n, '0'],
    ['boxed bigint', Object(10n), '1e1'],
    ['undefined member skipped', { a: undefined, b: 1 }, '{"b":1e0}'],
    ['undefined array element as null', [undefined], '[null]'],
    ['Date via toJSON', date, JSON.stringify(date.toJSON())],
    ['toJSON receives the key', { k: { toJSON: (key: string) => key } }, '{"k":"k"}'],
  ])('writes %s canonically', (_name, value, expected) => {
    expect(canonicalizeValue(value)).toBe(expected);
  });

  it.each<[string, unknown, string]>([
    ['reordered object', { b: 1, a: [1.5] }, '{"a":[15e-1],"b":1.0}'],
    ['bigint beyond doubles', { id: 12345678901234567891n }, '{"id":12345678901234567891}'],
    ['escaped strings', { '\u00e9': '\ud83d\ude00' }, '{"\\u00e9":"\\ud83d\\ude00"}'],
  ])('matches equivalent JSON text for %s', (_name, value, text) => {
    expect(canonicalizeValue(value)).toBe(canonicalizeJsonText(text));
  });

  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;

  it.each<[string, unknown]>([
    ['top-level undefined', undefined],
    ['top-level function', () => 1],
    ['top-level symbol', Symbol('s')],
  ])('throws TypeError for %s', (_name, value) => {
    expect(() => canonicalizeValue(value)).toThrow(TypeError);
  });

  // What a body parser can hand over: a request error (400), not a bug (500).
  it.each<[string, unknown]>([
    ['NaN', NaN],
    ['Infinity (a parsed 1e400)', Infinity],
    ['-Infinity', -Infinity],
    ['nested NaN', { a: [NaN] }],
    ['cycle', cyclic],
    ['nesting of 513 levels', nestedValue(513)],
    ['nesting of 600 levels', nestedValue(600)],
    ['a bigint of 1001 digits', BigInt('9'.repeat(1001))],
  ])('throws InvalidJsonError for %s', (_name, value) => {
    expect(() => canonicalizeValue(value)).toThrow(InvalidJsonError);
  });

  it.each<[string, unknown, number]>([
    ['nesting of 65 levels', nestedValue(65), 64],
    ['nesting of 3 levels', nestedValue(3), 2],
  ])('applies the given nesting bound: %s', (_name, value, maxDepth) => {
    expect(() => canonicalizeValue(value, { maxDepth, maxNumberDigits: 1000 })).toThrow(
      InvalidJsonError,
    );
  });
});

describe('bounds on JSON text', () => {
  const limits = { maxDepth: 64, maxNumberDigits: 1000 };
  it.each<[string, string]>([
    ['a mantissa of 1001 digits', '9'.repeat(1001)],
    ['a fraction pushing the mantissa over 1000 digits', `1.${'0'.repeat(1000)}1`],
    ['an exponent of 1001 digits', `1e${'9'.repeat(1001)}`],
    ['a negative exponent of 1001 digits', `[1e-${'9'.repeat(1001)}]`],
    ['nesting of 65 levels', nested(65)],
    ['nesting of 65 objects', '{"a":'.repeat(65) + '1' + '}'.repeat(65)],
  ])('refuses %s', (_name, text) => {
    expect(() => canonicalizeJsonText(text, limits)).toThrow(InvalidJsonError);
  });

  it.each<[string, string]>([
    ['a mantissa of exactly 1000 digits', '9'.repeat(1000)],
    ['an exponent of exactly 1000 digits', `1e${'9'.repeat(1000)}`],
    ['nesting of exactly 64 levels', nested(64)],
  ])('accepts %s', (_name, text) => {
    expect(() => canonicalizeJsonText(text, limits)).not.toThrow();
  });

  it.each<[string, string, boolean]>([
    ['10,000 keys across objects', `[${'{"a":1,"b":2},'.repeat(4999)}{"a":1,"b":2}]`, true],
    ['10,001 keys', `[${'{"a":1,"b":2},'.repeat(5000)}{"a":1}]`, false],
  ])('counts object keys over the whole body: %s', (_name, text, accepted) => {
    const bounded = { ...limits, maxKeys: 10_000 };
    if (accepted) expect(() => canonicalizeJsonText(text, bounded)).not.toThrow();
    else expect(() => canonicalizeJsonText(text, bounded)).toThrow('More than 10000 object keys');
    const parsed: unknown = JSON.parse(text);
    if (accepted) expect(() => canonicalizeValue(parsed, bounded)).not.toThrow();
    else expect(() => canonicalizeValue(parsed, bounded)).toThrow('More than 10000 object keys');
  });

  it('refuses the 1 MiB body whose exponent took 430 ms, at its first number', () => {
    const hostile = `{"amount":1e${'9'.repeat(1024 * 1024 - 20)}}`;
    expect(() => canonicalizeJsonText(hostile, limits)).toThrow(
      'A number whose exponent has more than 1000 digits',
    );
  });
});
