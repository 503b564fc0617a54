import { condensed } from './sql-condense.js';

const rows = (count: number, width: number) =>
  Array.from(
    { length: count },
    (_, row) =>
      `(${Array.from({ length: width }, (_, column) => `$${row * width + column + 1}`).join(', ')})`,
  ).join(', ');

describe('condensed', () => {
  it.each<[string, string, string]>([
    [
      'bulk rows',
      `INSERT INTO t (a, b) VALUES ${rows(3, 2)}`,
      'INSERT INTO t (a, b) VALUES ($1, $2)',
    ],
    [
      'DEFAULT, NULL and casts',
      'INSERT INTO t VALUES ($1::jsonb, DEFAULT), ($2, NULL), ($3::text[], default)',
      'INSERT INTO t VALUES ($1::jsonb, DEFAULT)',
    ],
    ['an IN list', 'SELECT 1 FROM t WHERE id IN ($1, $2, $3)', 'SELECT 1 FROM t WHERE id IN ($1)'],
    // Kept whole: a call's arguments, rows with anything but values in them.
    [
      "a call's arguments",
      "SELECT set_config('role', $1, $2)",
      "SELECT set_config('role', $1, $2)",
    ],
    [
      "a call's arguments, each in parentheses",
      'SELECT set_config(($1), ($2), ($3))',
      'SELECT set_config(($1), ($2), ($3))',
    ],
    [
      'rows with a call',
      'INSERT INTO t VALUES ($1, now()), ($2, now())',
      'INSERT INTO t VALUES ($1, now()), ($2, now())',
    ],
    ['one row', 'INSERT INTO t VALUES ($1, $2)', 'INSERT INTO t VALUES ($1, $2)'],
    // Literals: an import in one text.
    [
      'rows of literals',
      "INSERT INTO t VALUES ('a; role', 1, -2.5e3, TRUE), ('it''s', 2, 3, false), (NULL, 0, 1, 'x')",
      "INSERT INTO t VALUES ('a; role', 1, -2.5e3, TRUE)",
    ],
    [
      'an IN list of strings',
      "SELECT 1 FROM t WHERE a IN ('x', 'y;z')",
      "SELECT 1 FROM t WHERE a IN ('x')",
    ],
    [
      'two VALUES',
      'INSERT INTO a VALUES (1), (2); INSERT INTO b VALUES (3), (4)',
      'INSERT INTO a VALUES (1); INSERT INTO b VALUES (3)',
    ],
    // Not cut: VALUES in a string or a name, after a dot; a text whose strings or comments
    // are not plain (a backslash, a comment, a dollar-quoted body, U&).
    ['VALUES in a string', "SELECT 'VALUES (1), (2)'", "SELECT 'VALUES (1), (2)'"],
    ['VALUES in a quoted name', 'SELECT 1 AS "VALUES (1), (2)"', 'SELECT 1 AS "VALUES (1), (2)"'],
    ['a function named values', 'SELECT s.values((1), (2), (3))', 'SELECT s.values((1), (2), (3))'],
    ['a backslash', "INSERT INTO t VALUES ('\\'), ('x')", "INSERT INTO t VALUES ('\\'), ('x')"],
    ['a comment', 'INSERT INTO t VALUES (1), (2) -- two', 'INSERT INTO t VALUES (1), (2) -- two'],
    [
      'a dollar-quoted body',
      'INSERT INTO t VALUES ($$a$$), ($1)',
      'INSERT INTO t VALUES ($$a$$), ($1)',
    ],
    [
      'a string opened before VALUES',
      "SELECT 'x VALUES (1), ('; COMMIT; SELECT '), (2) y'",
      "SELECT 'x VALUES (1), ('; COMMIT; SELECT '), (2) y'",
    ],
    [
      'a row with a name',
      'INSERT INTO t VALUES (1, a), (2, b)',
      'INSERT INTO t VALUES (1, a), (2, b)',
    ],
  ])('%s', (_name, sql, expected) => {
    expect(condensed(sql)).toBe(expected);
  });
});
