import { inlineParameters, raiseUnlessOneRow } from './inline-statement.js';

describe('inlineParameters', () => {
  it.each<[string, string, unknown[], string]>([
    ['a string', 'WHERE key = $1', ["it's"], "WHERE key = 'it''s'"],
    // node-postgres writes an E'' literal, with a space before it, for a backslash.
    ['a backslash', 'WHERE key = $1', ['a\\b'], "WHERE key =  E'a\\\\b'"],
    ['numbers and NULL', 'SET a = $1, b = $2', [42, null], 'SET a = 42, b = NULL'],
    [
      'a Buffer as bytea',
      'SET body = $1',
      [Buffer.from([0, 255])],
      "SET body = decode('00ff', 'hex')",
    ],
    [
      'an object as JSON',
      'SET h = $1',
      [{ 'content-type': "a'b" }],
      `SET h = '{"content-type":"a''b"}'`,
    ],
    ['$10 is not $1 then 0', 'VALUES ($1, $10)', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 'VALUES (1, 10)'],
    [
      'a cast after it',
      'jsonb_build_object($1::text, $2::jsonb)',
      ['p', { a: 1 }],
      `jsonb_build_object('p'::text, '{"a":1}'::jsonb)`,
    ],
  ])('%s', (_name, text, values, expected) => {
    expect(inlineParameters(text, values)).toBe(expected);
  });

  it('refuses a number PostgreSQL would not read back', () => {
    expect(() => inlineParameters('$1', [Number.NaN])).toThrow(RangeError);
  });
});

describe('raiseUnlessOneRow', () => {
  it('wraps the UPDATE so that no row divides by zero', () => {
    expect(raiseUnlessOneRow('UPDATE t SET a = 1 WHERE k = 2')).toBe(
      'WITH fenced AS (UPDATE t SET a = 1 WHERE k = 2 RETURNING 1) SELECT 1 / count(*) AS fenced FROM fenced',
    );
  });
});
