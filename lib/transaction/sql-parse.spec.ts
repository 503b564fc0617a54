import { condensed, parsedStatements, sqlReaderReady } from './sql-parse.js';
import { sessionSettingOf, setsIdentity, transactionControlOf } from './sql-text.js';

beforeAll(() => sqlReaderReady());

const rows = (count: number, width: number, value = (i: number) => `$${i}`) =>
  Array.from(
    { length: count },
    (_, row) =>
      `(${Array.from({ length: width }, (_, column) => value(row * width + column + 1)).join(', ')})`,
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
      'rows with a call',
      'INSERT INTO t VALUES ($1, now()), ($2, now())',
      'INSERT INTO t VALUES ($1, now()), ($2, now())',
    ],
    ['one row', 'INSERT INTO t VALUES ($1, $2)', 'INSERT INTO t VALUES ($1, $2)'],
  ])('%s', (_name, sql, expected) => {
    expect(condensed(sql)).toBe(expected);
  });

  it('reads a long text as its uncut self for every check', () => {
    const head = 'INSERT INTO "users" ("name", "role") VALUES ';
    const bulk = `${head}${rows(3000, 2)}`;
    for (const tail of [
      '',
      '; COMMIT',
      '; SET ROLE app',
      "; SELECT set_config('role', $1, false)",
      ` RETURNING "role"; SELECT 'x ${rows(2, 2)}'; SET LOCAL ROLE app`,
    ]) {
      const sql = bulk + tail;
      expect(sql.length).toBeGreaterThan(4096);
      const uncut = [transactionControlOf, sessionSettingOf, setsIdentity].map((check) => {
        // The check as it reads a text short enough to be parsed whole.
        const short = head + rows(1, 2) + tail;
        return check(short);
      });
      expect([transactionControlOf(sql), sessionSettingOf(sql), setsIdentity(sql)]).toEqual(uncut);
      expect(parsedStatements(sql)?.length).toBe(tail === '' ? 1 : tail.split(';').length);
    }
  });
});
