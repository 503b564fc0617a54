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
