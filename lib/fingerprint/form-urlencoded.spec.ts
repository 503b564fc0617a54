import { canonicalForm, formParameters } from './form-urlencoded.js';

describe('formParameters', () => {
  it.each<[string, string, [string, string][]]>([
    ['an empty body', '', []],
    ['one parameter', 'a=1', [['a', '1']]],
    ['a name without =', 'a', [['a', '']]],
    ['a name with an empty value', 'a=', [['a', '']]],
    ['an = inside the value', 'a=b=c', [['a', 'b=c']]],
    ['+ is a space', 'a=x+y', [['a', 'x y']]],
    ['%2B is a plus', 'a=%2B', [['a', '+']]],
    ['%XX in a name', '%61=1', [['a', '1']]],
    ['lower- and upper-case hex', '%c3%A9=%C3%a9', [['\u00c3\u00a9', '\u00c3\u00a9']]],
    ['a % not followed by two hex digits stays', 'a=%ZZ%4', [['a', '%ZZ%4']]],
    [
      'empty sequences are no parameter',
      '&a=1&&b=2&',
      [
        ['a', '1'],
        ['b', '2'],
      ],
    ],
    ['an empty name', '=1', [['', '1']]],
    [
      'the order sent',
      'b=1&a=2&b=0',
      [
        ['b', '1'],
        ['a', '2'],
        ['b', '0'],
      ],
    ],
  ])('%s: %j', (_name, body, expected) => {
    expect(formParameters(body)).toEqual(expected);
    expect(formParameters(Buffer.from(body))).toEqual(expected);
  });
});

describe('canonicalForm', () => {
  it.each([
    ['parameters in another order', 'a=1&b=2&c=3', 'c=3&a=1&b=2'],
    ['a byte spelled %XX or as itself', 'a=A%2F', 'a=%41/'],
    ['a space spelled + or %20', 'a=x+y', 'a=x%20y'],
    ['a name spelled %XX', 'name=1', '%6Eame=1'],
    ['empty sequences', 'a=1&b=2', '&&a=1&b=2&'],
    ['a name without = and one with an empty value', 'a&b=1', 'a=&b=1'],
    ['a repeated name in its order, the others moved', 'a=1&b=x&a=2', 'b=x&a=1&a=2'],
    ['as bytes or as text', Buffer.from('é=1'), 'é=1'],
  ])('the same parameters: %s', (_name, body, other) => {
    expect(canonicalForm(body)).toBe(canonicalForm(other));
  });

  it.each([
    ['another value', 'a=1', 'a=2'],
    ['another name', 'a=1', 'b=1'],
    ['names differ by case', 'a=1', 'A=1'],
    ['a repeated name in another order', 'a=1&a=2', 'a=2&a=1'],
    ['a parameter more', 'a=1', 'a=1&a=1'],
    ['a plus is not a space', 'a=%2B', 'a=+'],
    ['an = in the value is not a separator', 'a=b=c', 'a=b&c'],
    ['& escaped is a character, not a separator', 'a=1%262', 'a=1&2'],
    // URLSearchParams decodes both to U+FFFD: two requests would hash the same.
    ['bytes that are not UTF-8', 'a=%FF', 'a=%FE'],
    ['a value moved to another name', 'a=1&b=2', 'a=2&b=1'],
  ])('different parameters: %s', (_name, body, other) => {
    expect(canonicalForm(body)).not.toBe(canonicalForm(other));
  });

  it('sorts by name, keeping the order within a name, in a text no JSON body can be', () => {
    expect(canonicalForm('b=2&a=y&a=x')).toBe('\0form\0[["a","y"],["a","x"],["b","2"]]');
  });
});
