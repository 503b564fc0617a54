import { parsedStatements, sqlReaderReady, unreadableOf } from './sql-parse.js';
import { sessionSettingOf, setsIdentity, transactionControlOf } from './sql-text.js';

beforeAll(() => sqlReaderReady());

const rows = (count: number, width: number, value = (i: number) => `$${i}`) =>
  Array.from(
    { length: count },
    (_, row) =>
      `(${Array.from({ length: width }, (_, column) => value(row * width + column + 1)).join(', ')})`,
  ).join(', ');

describe('condensed, then parsed', () => {
  it('reads a long text as its uncut self for every check', () => {
    const head = 'INSERT INTO "users" ("name", "role") VALUES ';
    const bulk = `${head}${rows(3000, 2)}`;
    for (const tail of [
      '',
      '; COMMIT',
      '; SET ROLE app',
      "; SELECT set_config('role', $1, false)",
      "; SELECT set_config(('role'), ($1), ($2))",
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

describe('unreadableOf', () => {
  // `system_user` is a reserved word from PostgreSQL 16 on: the parser (18) refuses it as a
  // column's name, which PostgreSQL 15 accepts.
  it.each<[string, unknown, boolean]>([
    ['several statements', 'INSERT INTO t (system_user) VALUES (1); COMMIT', true],
    ['a SET', 'SET ROLE system_user', true],
    ['a SET after a comment', '/* who */ SET ROLE system_user', true],
    ['a BEGIN', 'BEGIN; INSERT INTO t (system_user) VALUES (1)', true],
    ['set_config', "SELECT set_config('role', system_user) FROM (SELECT 1) system_user", true],
    ['an advisory lock', 'SELECT pg_advisory_lock(1) FROM t AS system_user', true],
    ['a quoted call', 'SELECT "pg_advisory_unlock"(1) FROM t AS system_user', true],
    // Let through: at worst it runs as the handler meant, or the server refuses it too.
    ['one plain statement', 'INSERT INTO t (system_user) VALUES (1)', false],
    ['a trailing ;', 'INSERT INTO t (system_user) VALUES (1);', false],
    ['an unterminated string', "SELECT 'abc; COMMIT", false],
    ['a text that parses', 'SELECT 1; COMMIT', false],
    ['not a string', { text: 'x; COMMIT' }, false],
  ])('%s', (_name, sql, refused) => {
    expect(unreadableOf(sql) !== undefined).toBe(refused);
  });

  it("says the parser's words", () => {
    expect(unreadableOf('SET ROLE system_user')).toBe('syntax error at or near "system_user"');
  });
});

describe('condensed, then parsed: a name that ends in VALUES (adversary 5)', () => {
  // PostgreSQL reads any non-ASCII character as a letter of a name (the lexer's ident_start and
  // ident_cont hold every byte from \200 up), and never a no-break space as a space: the cut's
  // scanner takes `[A-Za-z_]` for the letters of a word, and `\s` (U+00A0 among them) for
  // space, so in `évalues('app')` (a function of the app's) and `values\u00a0('app')` it
  // finds the keyword VALUES, and cuts what follows that call, `, (false)`: here the third
  // argument of the set_config around it. The long text then reads as a call with two
  // arguments, which sessionSettingOf passes over; PostgreSQL runs the three-argument call,
  // and the role stays with the pooled connection after the request.
  const padding = (length: number) => `, '${'x'.repeat(length)}' AS padding`;
  it.each([
    [
      'a name with a non-ASCII letter before VALUES',
      "SELECT set_config('role', évalues('app'), (false))",
    ],
    [
      'a name that ends with a no-break space',
      "SELECT set_config('role', values\u00a0('app'), (false))",
    ],
  ])('%s: the long text reads as its short self', (_name, call) => {
    const short = call + padding(10);
    const long = call + padding(5000);
    expect(long.length).toBeGreaterThan(4096);
    expect(sessionSettingOf(short)).toBe("set_config('role', …, false)");
    expect(sessionSettingOf(long)).toBe(sessionSettingOf(short));
  });
});
