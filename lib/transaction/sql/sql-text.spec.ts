import {
  isPlainRead,
  isTransactionModeOnly,
  commitEndsOf,
  localSettingsOf,
  sessionSettingsOf,
  nestedControlOf,
  rollsBackToSavepoint,
  type SavepointControl,
  savepointControlsOf,
  setsForTransaction,
  setsIdentity,
  setsReadOnly,
  sessionAdvisoryLockOf,
  sessionSettingOf,
  type StatementStep,
  statementStepsOf,
  statementsOf,
  transactionControlOf,
} from './sql-text.js';
import { sqlReaderReady } from './sql-parse.js';
import { noteShadowedBuiltIns } from './shadowed-built-ins.js';

beforeAll(() => sqlReaderReady());

describe('isPlainRead', () => {
  it.each<[string, unknown, boolean]>([
    // What TypeORM sends for reads and counts, and what handlers write by hand.
    [
      'a repository findOne',
      'SELECT "LedgerEntry"."id" AS "LedgerEntry_id" FROM "ledger" "LedgerEntry" WHERE (("LedgerEntry"."tag" = $1)) LIMIT 1',
      true,
    ],
    [
      'a repository count',
      'SELECT COUNT(DISTINCT("Order"."id")) AS "cnt" FROM "orders" "Order" WHERE "Order"."tag" = $1',
      true,
    ],
    ['a count with a cast', 'SELECT count(*)::int AS n FROM ledger WHERE tag = $1', true],
    ['lower case, leading space, a trailing ;', '  select 1;', true],
    ['a comment first', '/* why */ SELECT 1 -- trailing', true],
    ['a keyword in a string', "SELECT 'x; DELETE FROM t' AS s", true],
    ['a keyword in a dollar-quoted string', 'SELECT $q$; DELETE FROM t$q$ AS s', true],
    ['a subquery with IN and EXISTS', 'SELECT 1 WHERE 1 IN (SELECT 1) AND EXISTS (SELECT 1)', true],
    ['a name that is only a word', 'SELECT "for", "update" FROM t', true],
    // What must open the transaction.
    ['a SELECT then a DELETE', 'SELECT 1; DELETE FROM orders WHERE id = 1', false],
    ['a SELECT then a DELETE after a comment', 'SELECT 1 /* ; */ ; DELETE FROM t', false],
    ['WITH … DELETE', 'WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d', false],
    // A WITH of reads is a read (Kysely's `db.with`, Drizzle's `$with`); one that writes shows
    // its INSERT, UPDATE, DELETE or MERGE in the tree, wherever it stands.
    ['WITH … SELECT', 'WITH x AS (SELECT 1) SELECT * FROM x', true],
    [
      'Kysely’s db.with(…)',
      'with "latest" as (select "rate" from "rates" order by "id" desc limit $1) select "rate" from "latest"',
      true,
    ],
    [
      'WITH RECURSIVE, MATERIALIZED, column names',
      'WITH RECURSIVE x(n) AS MATERIALIZED (SELECT 1 UNION ALL SELECT n + 1 FROM x WHERE n < 3) SELECT * FROM x',
      true,
    ],
    [
      'WITH … INSERT … SELECT (a data-modifying CTE)',
      'WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x',
      false,
    ],
    ['WITH … UPDATE in a CTE', 'WITH u AS (UPDATE t SET a = 1 RETURNING a) SELECT a FROM u', false],
    [
      'WITH … MERGE in a CTE',
      'WITH m AS (MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE RETURNING t.id) SELECT * FROM m',
      false,
    ],
    [
      'a write in a CTE inside a CTE',
      'WITH a AS (WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d) SELECT * FROM a',
      false,
    ],
    ['WITH then an INSERT', 'WITH x AS (SELECT 1 AS a) INSERT INTO t SELECT a FROM x', false],
    ['WITH then a DELETE', 'WITH x AS (SELECT 1 AS a) DELETE FROM t USING x', false],
    ['WITH … SELECT INTO', 'WITH x AS (SELECT 1 AS a) SELECT a INTO copy FROM x', false],
    ['WITH … FOR UPDATE', 'WITH x AS (SELECT * FROM t FOR UPDATE) SELECT * FROM x', false],
    ['a function of the app in a CTE', 'WITH x AS (SELECT forget_order(1)) SELECT * FROM x', false],
    [
      'a CTE’s SEARCH and CYCLE clauses',
      'WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM x WHERE n < 3) SEARCH DEPTH FIRST BY n SET o CYCLE n SET c USING p SELECT * FROM x',
      true,
    ],
    // The short forms of a SELECT.
    ['TABLE t', 'TABLE orders', true],
    ['VALUES', "VALUES (1, 'a'), (2, 'b')", true],
    ['VALUES with a function of the app', 'VALUES (forget_order(1))', false],
    ['VALUES with nextval', "VALUES (nextval('s'))", false],
    // Everyday reads: full-text search, series, patterns, ordered-set aggregates.
    [
      'full-text search (to_tsvector, to_tsquery, @@)',
      "SELECT id FROM notes WHERE to_tsvector('english', body) @@ websearch_to_tsquery('english', $1) ORDER BY ts_rank(to_tsvector(body), plainto_tsquery($1)) DESC",
      true,
    ],
    ['generate_series in FROM', 'SELECT d FROM generate_series(1, 7) AS d', true],
    ['LIKE … ESCAPE', "SELECT 1 FROM t WHERE a LIKE 'x!%' ESCAPE '!'", true],
    [
      'percentile_cont … WITHIN GROUP',
      'SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM t',
      true,
    ],
    ['a function of the app', 'SELECT forget_order($1)', false],
    ['a schema-qualified function', 'SELECT app.forget_order($1)', false],
    ['a quoted function name', 'SELECT "forget"($1)', false],
    ['nextval', "SELECT nextval('s')", false],
    ['set_config', "SELECT set_config('a.b', '1', true)", false],
    ['an advisory lock', 'SELECT pg_advisory_xact_lock(1)', false],
    ['pg_notify', "SELECT pg_notify('c', 'x')", false],
    ['FOR UPDATE', 'SELECT * FROM t WHERE id = 1 FOR UPDATE', false],
    ['FOR NO KEY UPDATE', 'SELECT * FROM t FOR NO KEY UPDATE', false],
    ['FOR SHARE', 'select * from t for share', false],
    ['FOR KEY SHARE', 'SELECT * FROM t FOR KEY SHARE', false],
    ['SELECT INTO', 'SELECT * INTO copy FROM t', false],
    ['an UPDATE', 'UPDATE t SET a = 1', false],
    ['an empty text', '', false],
    ['not a string', { text: 'SELECT 1' }, false],
    ['a parenthesised SELECT (the parser reads it as one)', '(SELECT 1)', true],
    [
      'a write in a subquery’s CTE',
      'SELECT * FROM (WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d) s',
      false,
    ],
    ['a lock in a subquery', 'SELECT * FROM (SELECT * FROM t FOR UPDATE) s', false],
    ['a function in FROM', 'SELECT * FROM forget_order(1)', false],
    ['an escaped function name', 'SELECT U&"nextv\\0061l"(\'s\')', false],
    [
      'SQL syntax for built-ins',
      "SELECT extract(year FROM now()), trim(a), substring(a FROM 2), position('x' IN a) FROM t",
      true,
    ],
    ['pg_catalog’s count', 'SELECT pg_catalog.count(*) FROM t', true],
    ['not SQL PostgreSQL parses', 'SELECT FROM WHERE', false],
    // What TypeORM's finds are made of: joins, ranges, patterns, lists, pages.
    [
      'a find with a join, a range, a pattern, a list and a page',
      'SELECT DISTINCT "distinctAlias"."o_id" AS "ids_o_id" FROM (SELECT "o"."id" AS "o_id" FROM "orders" "o" LEFT JOIN "lines" "l" ON "l"."orderId"="o"."id" WHERE "o"."at" BETWEEN $1 AND $2 AND "o"."name" ILIKE $3 AND "o"."tag" IN ($4, $5) AND "o"."deletedAt" IS NULL AND "o"."id" = ANY($6) AND NOT ("o"."x" <> $7)) "distinctAlias" ORDER BY "distinctAlias"."o_id" ASC LIMIT 10 OFFSET 20',
      true,
    ],
    [
      'a CASE, COALESCE, a cast and a collation',
      'SELECT CASE WHEN a > 1 THEN coalesce(b, \'x\') END, c::int, d COLLATE "C" FROM t',
      true,
    ],
    // PostgreSQL 16 and later's JSON syntax: on 15, a call of the app's function of that name.
    ['json_value (PostgreSQL 17 syntax)', "SELECT json_value('{}'::jsonb, '$.a')", false],
    ['IS JSON (PostgreSQL 16)', "SELECT '{}' IS JSON", false],
    ['an operator of the app', 'SELECT 7 ### 1', false],
    ['an operator of another schema', 'SELECT 7 OPERATOR(app.+) 1', false],
    ['an operator of pg_catalog', 'SELECT 7 OPERATOR(pg_catalog.+) 1', true],
    // Its escape function is PostgreSQL's own, written by the parser as pg_catalog's.
    ['SIMILAR TO', "SELECT 1 FROM t WHERE a SIMILAR TO 'x%'", true],
    ['a word that only begins with table', 'tablesample_of(1)', false],
    ['an INSERT (the first word decides)', 'INSERT INTO t VALUES (1)', false],
    ['a word that only begins with select', 'selected_rows()', false],
    ['SELECT in capitals after a newline', '\n\tSELECT 1', true],
  ])('%s: %p', (_name, sql, expected) => {
    expect(isPlainRead(sql)).toBe(expected);
    // Asked again, the remembered answer is the same.
    expect(isPlainRead(sql)).toBe(expected);
  });

  it('answers false for a name the app shadows with a function or operator that may write', () => {
    // Before: PostgreSQL's own.
    expect(isPlainRead('SELECT md5(a) FROM t WHERE b % 2 = 0')).toBe(true);
    noteShadowedBuiltIns({ functions: ['md5'] });
    expect(isPlainRead('SELECT md5(a) FROM t')).toBe(false);
    expect(isPlainRead('SELECT pg_catalog.md5(a) FROM t')).toBe(false);
    expect(isPlainRead('SELECT a FROM t WHERE b % 2 = 0')).toBe(true);
    noteShadowedBuiltIns({ operators: ['%'] });
    expect(isPlainRead('SELECT a FROM t WHERE b % 2 = 0')).toBe(false);
    expect(isPlainRead('SELECT a FROM t WHERE b = 2')).toBe(true);
    // What a read may reach without naming it: a view's query, a cast's or a domain's code.
    noteShadowedBuiltIns({ relations: ['audited_view'], types: ['money2', 'checked_int'] });
    expect(isPlainRead('SELECT tag FROM audited_view')).toBe(false);
    expect(isPlainRead('SELECT tag FROM app.audited_view v JOIN t ON true')).toBe(false);
    expect(isPlainRead('TABLE audited_view')).toBe(false);
    expect(isPlainRead('WITH x AS (SELECT tag FROM audited_view) SELECT * FROM x')).toBe(false);
    expect(isPlainRead('SELECT 5::money2')).toBe(false);
    expect(isPlainRead('SELECT CAST(7 AS public.checked_int)')).toBe(false);
    expect(isPlainRead('SELECT 5::int, a::text FROM audited')).toBe(true);
    // A function of a row, written as a column: `t.receipt` is `receipt(t)`.
    expect(isPlainRead('SELECT t.receipt FROM tags t')).toBe(true);
    noteShadowedBuiltIns({ columns: ['receipt'] });
    expect(isPlainRead('SELECT t.receipt FROM tags t')).toBe(false);
    expect(isPlainRead('SELECT (t).receipt FROM tags t')).toBe(false);
    expect(isPlainRead('SELECT tags.receipt FROM tags')).toBe(false);
    expect(isPlainRead('SELECT t.tag FROM tags t')).toBe(true);
    // A cast of the app's to json: what writes a value as JSON may call its function.
    expect(isPlainRead('SELECT to_json(t.mood), json_agg(t) FROM tags t')).toBe(true);
    noteShadowedBuiltIns({ types: ['json'] });
    expect(isPlainRead('SELECT to_json(t.mood) FROM tags t')).toBe(false);
    expect(isPlainRead('SELECT jsonb_agg(t) FROM tags t')).toBe(false);
    expect(isPlainRead('SELECT lower(t.tag) FROM tags t')).toBe(true);
  });

  it.each([
    [
      "an app's operator against a subquery",
      "SELECT 1 FROM t WHERE tag ~~~ ANY (SELECT 'X')",
      false,
    ],
    ["PostgreSQL's against a subquery", "SELECT 1 FROM t WHERE tag = ANY (SELECT 'X')", true],
    ['EXISTS (no operator)', 'SELECT 1 FROM t WHERE EXISTS (SELECT 1)', true],
    ["an app's operator in ORDER BY USING", 'SELECT a FROM t ORDER BY a USING ~<~', false],
    ["PostgreSQL's in ORDER BY USING", 'SELECT a FROM t ORDER BY a USING <', true],
  ])('reads the operator of %s', (_name, sql, expected) => {
    expect(isPlainRead(sql)).toBe(expected);
  });

  it('answers past the memory of texts it keeps, and for texts too long to keep', () => {
    for (let i = 0; i < 1200; i++) {
      expect(isPlainRead(`SELECT ${i}`)).toBe(true);
      expect(isPlainRead(`SELECT nextval('s${i}')`)).toBe(false);
    }
    const long = `SELECT 1 AS a${' '.repeat(5000)}`;
    expect(isPlainRead(long)).toBe(true);
    expect(isPlainRead(`${long}; DELETE FROM t`)).toBe(false);
  });
});

describe('transactionControlOf', () => {
  it.each<[string, unknown, string | undefined]>([
    ['COMMIT', 'COMMIT', 'COMMIT'],
    [
      'after "begin atomic" that is a column and its alias, not a body',
      'SELECT begin atomic FROM (SELECT 1 AS begin) s; COMMIT',
      'COMMIT',
    ],
    ['commit work', 'commit work', 'COMMIT'],
    ['COMMIT AND CHAIN', 'COMMIT AND CHAIN', 'COMMIT'],
    ['END', 'END', 'END'],
    ['ABORT', 'abort', 'ABORT'],
    ['ROLLBACK', 'ROLLBACK', 'ROLLBACK'],
    ['ROLLBACK WORK', 'ROLLBACK WORK', 'ROLLBACK'],
    ['BEGIN', 'BEGIN ISOLATION LEVEL SERIALIZABLE', 'BEGIN'],
    ['START TRANSACTION', 'START TRANSACTION', 'START TRANSACTION'],
    ['PREPARE TRANSACTION', "PREPARE TRANSACTION 'x'", 'PREPARE TRANSACTION'],
    ['COMMIT PREPARED', "COMMIT PREPARED 'x'", 'COMMIT'],
    ['ROLLBACK PREPARED', "ROLLBACK PREPARED 'x'", 'ROLLBACK'],
    [
      'a COMMIT after an INSERT',
      'INSERT INTO t VALUES (1); COMMIT; INSERT INTO t VALUES (2)',
      'COMMIT',
    ],
    ['a comment before it', '-- done\nCOMMIT', 'COMMIT'],
    ['after a statement with a multi-byte name', 'SELECT 1 AS "é€"; commit', 'COMMIT'],
    ['after an E string hiding a quote', "SELECT E'\\''; COMMIT", 'COMMIT'],
    ['a text PostgreSQL refuses runs nothing', 'SELECT FROM WHERE; COMMIT', undefined],
    ['ROLLBACK TO SAVEPOINT', 'ROLLBACK TO SAVEPOINT typeorm_1', undefined],
    ['ROLLBACK TRANSACTION TO', 'ROLLBACK TRANSACTION TO s', undefined],
    ['ROLLBACK WORK TO', 'ROLLBACK WORK TO SAVEPOINT s', undefined],
    ['SAVEPOINT', 'SAVEPOINT typeorm_1', undefined],
    ['RELEASE SAVEPOINT', 'RELEASE SAVEPOINT typeorm_1', undefined],
    ['PREPARE a statement', 'PREPARE q AS SELECT 1', undefined],
    ['a DO block', 'DO $$ BEGIN PERFORM 1; END $$', undefined],
    ['COMMIT in a string', "INSERT INTO t VALUES ('; COMMIT')", undefined],
    ['a column named end', 'SELECT "end", begin_at FROM t', undefined],
    [
      'a BEGIN ATOMIC function body',
      'CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END',
      undefined,
    ],
    ['an INSERT', 'INSERT INTO t VALUES ($1)', undefined],
    ['not a string', 42, undefined],
  ])('%s: %p', (_name, sql, expected) => {
    expect(transactionControlOf(sql)).toBe(expected);
  });
});

describe('statementsOf', () => {
  it.each<[string, string, number]>([
    ['one', 'SELECT 1', 1],
    ['two', 'SELECT 1; SELECT 2', 2],
    ['empty ones left out', ';; SELECT 1 ;;', 1],
    ['a ; in a quoted name', 'SELECT 1 AS "a;b"', 1],
    ['a ; in an E string with an escaped quote', "SELECT E'a\\';b'", 1],
    ['a ; in a nested comment', 'SELECT 1 /* a /* ; */ ; */', 1],
  ])('%s', (_name, sql, count) => {
    expect(statementsOf(sql)).toHaveLength(count);
  });
});

describe('nestedControlOf', () => {
  it.each<[string, unknown, ReturnType<typeof nestedControlOf>]>([
    // What the data layers send on a connection they took from the pool.
    ['Drizzle', 'begin', { kind: 'begin' }],
    [
      'Drizzle with a level',
      'begin isolation level serializable',
      { kind: 'begin', level: 'SERIALIZABLE' },
    ],
    [
      'Drizzle with modes',
      'begin isolation level repeatable read read only deferrable',
      { kind: 'begin', level: 'REPEATABLE READ', readOnly: true },
    ],
    ['Kysely’s access mode', 'start transaction read only', { kind: 'begin', readOnly: true }],
    ['read write', 'start transaction read write', { kind: 'begin' }],
    ['Prisma', 'BEGIN', { kind: 'begin' }],
    [
      'Prisma’s level',
      'SET TRANSACTION ISOLATION LEVEL READ COMMITTED',
      { kind: 'set-isolation', level: 'READ COMMITTED' },
    ],
    [
      'Kysely',
      'start transaction isolation level read uncommitted',
      { kind: 'begin', level: 'READ UNCOMMITTED' },
    ],
    ['BEGIN WORK', 'BEGIN WORK;', { kind: 'begin' }],
    ['a tracing comment first', "/* traceparent='00-ab' */ BEGIN", { kind: 'begin' }],
    ['a line comment first', '-- tx\nCOMMIT', { kind: 'commit' }],
    [
      'modes with commas',
      'START TRANSACTION READ WRITE, ISOLATION LEVEL SERIALIZABLE',
      { kind: 'begin', level: 'SERIALIZABLE' },
    ],
    ['commit', 'commit', { kind: 'commit' }],
    ['COMMIT TRANSACTION', 'COMMIT TRANSACTION', { kind: 'commit' }],
    ['END', 'END', { kind: 'commit' }],
    ['COMMIT AND NO CHAIN', 'COMMIT AND NO CHAIN', { kind: 'commit' }],
    ['rollback', 'rollback', { kind: 'rollback' }],
    ['ABORT', 'ABORT', { kind: 'rollback' }],
    ['ROLLBACK WORK', 'ROLLBACK WORK', { kind: 'rollback' }],
    // Left to transactionControlOf (refused there) or not control at all.
    ['COMMIT AND CHAIN', 'COMMIT AND CHAIN', undefined],
    ['two statements', 'BEGIN; INSERT INTO t VALUES (1)', undefined],
    ['an unknown level', 'BEGIN ISOLATION LEVEL SNAPSHOT', undefined],
    ['ROLLBACK TO SAVEPOINT', 'ROLLBACK TO SAVEPOINT a', undefined],
    ['ROLLBACK PREPARED', "ROLLBACK PREPARED 'x'", undefined],
    ['SAVEPOINT', 'SAVEPOINT a', undefined],
    // The same level said as the setting (adversary 90).
    [
      'SET LOCAL transaction_isolation',
      "SET LOCAL transaction_isolation = 'repeatable read'",
      { kind: 'set-isolation', level: 'REPEATABLE READ' },
    ],
    [
      'SET transaction_isolation TO',
      "set transaction_isolation to 'SERIALIZABLE'",
      { kind: 'set-isolation', level: 'SERIALIZABLE' },
    ],
    [
      'SET SESSION transaction_isolation',
      "SET SESSION transaction_isolation = 'read committed'",
      { kind: 'set-isolation', level: 'READ COMMITTED' },
    ],
    ['transaction_isolation to DEFAULT', 'SET LOCAL transaction_isolation = DEFAULT', undefined],
    ['an unknown level as the setting', "SET transaction_isolation = 'snapshot'", undefined],
    [
      'default_transaction_isolation',
      "SET default_transaction_isolation = 'serializable'",
      undefined,
    ],
    ['SET something else', 'SET search_path TO app', undefined],
    ['SET TRANSACTION READ ONLY', 'SET TRANSACTION READ ONLY', undefined],
    ['an insert', 'INSERT INTO t VALUES (1)', undefined],
    ['not a string', { text: 'BEGIN' }, undefined],
  ])('%s', (_name, sql, expected) => {
    expect(nestedControlOf(sql)).toEqual(expected);
  });
});

describe('sessionAdvisoryLockOf', () => {
  it.each<[string, unknown, string | undefined]>([
    ['the lock', 'SELECT pg_advisory_lock($1)', 'pg_advisory_lock'],
    ['in capitals, two keys', 'SELECT PG_ADVISORY_LOCK(1, 2)', 'pg_advisory_lock'],
    ['shared', 'select pg_advisory_lock_shared(1)', 'pg_advisory_lock_shared'],
    ['try', 'select pg_try_advisory_lock($1) as ok', 'pg_try_advisory_lock'],
    ['try shared', 'select pg_try_advisory_lock_shared(1)', 'pg_try_advisory_lock_shared'],
    ['the unlock', 'SELECT pg_advisory_unlock($1)', 'pg_advisory_unlock'],
    ['the shared unlock', 'SELECT pg_advisory_unlock_shared(1)', 'pg_advisory_unlock_shared'],
    ['unlock all', 'SELECT pg_advisory_unlock_all()', 'pg_advisory_unlock_all'],
    ['schema-qualified', 'SELECT pg_catalog.pg_advisory_lock(1)', 'pg_advisory_lock'],
    ['a quoted name', 'SELECT "pg_advisory_lock"(1)', 'pg_advisory_lock'],
    ['with a space before (', 'SELECT pg_advisory_unlock (1)', 'pg_advisory_unlock'],
    ['inside a WHERE', 'SELECT * FROM t WHERE pg_try_advisory_lock(t.id)', 'pg_try_advisory_lock'],
    [
      'in a second statement',
      'INSERT INTO t VALUES (1); SELECT pg_advisory_lock(1)',
      'pg_advisory_lock',
    ],
    // What ends with the transaction, or is no call.
    ['the transaction-level lock', 'SELECT pg_advisory_xact_lock($1)', undefined],
    ['its shared variant', 'SELECT pg_advisory_xact_lock_shared(1)', undefined],
    ['its try variant', 'SELECT pg_try_advisory_xact_lock(1)', undefined],
    ['its try shared variant', 'SELECT pg_try_advisory_xact_lock_shared(1)', undefined],
    ['a name in a string', "SELECT 'pg_advisory_lock(1)'", undefined],
    ['a name in a comment', 'SELECT 1 /* pg_advisory_unlock(1) */', undefined],
    ['a name in a dollar-quoted body', 'SELECT $$pg_advisory_lock(1)$$', undefined],
    ['a quoted name in other case', 'SELECT "PG_ADVISORY_LOCK"(1)', undefined],
    ['a U& name with escapes', 'SELECT U&"pg_\\0061dvisory_lock"(1)', 'pg_advisory_lock'],
    ['in FROM', 'SELECT * FROM pg_advisory_lock(1)', 'pg_advisory_lock'],
    ['of another schema', 'SELECT app.pg_advisory_lock(1)', undefined],
    ['a column of that name', 'SELECT pg_advisory_lock FROM t', undefined],
    ['a function whose name only contains it', 'SELECT my_pg_advisory_lock(1)', undefined],
    ['pg_locks', "SELECT * FROM pg_locks WHERE locktype = 'advisory'", undefined],
    ['not a string', { text: 'SELECT pg_advisory_lock(1)' }, undefined],
  ])('%s: %p', (_name, sql, expected) => {
    expect(sessionAdvisoryLockOf(sql)).toBe(expected);
  });
});

describe('sessionSettingOf', () => {
  it.each<[string, unknown, string | undefined]>([
    ['SET ROLE', 'SET ROLE app', 'SET ROLE'],
    ['in lower case', 'set role app', 'SET ROLE'],
    ['SET SESSION ROLE', 'SET SESSION ROLE app', 'SET ROLE'],
    ['SET ROLE NONE', 'SET ROLE NONE', 'SET ROLE'],
    ['SET SESSION AUTHORIZATION', 'SET SESSION AUTHORIZATION app', 'SET SESSION AUTHORIZATION'],
    [
      'SET SESSION SESSION AUTHORIZATION',
      'SET SESSION SESSION AUTHORIZATION app',
      'SET SESSION AUTHORIZATION',
    ],
    ['SET search_path TO', 'SET search_path TO app, public', 'SET search_path'],
    ['SET search_path =', 'set search_path = app', 'SET search_path'],
    ['SET SESSION search_path', 'SET SESSION search_path TO app', 'SET search_path'],
    ['SET SCHEMA', "SET SCHEMA 'app'", 'SET search_path'],
    ['a quoted name', 'SET "search_path" TO app', 'SET search_path'],
    ['in a second statement', 'INSERT INTO t VALUES (1); SET ROLE app', 'SET ROLE'],
    [
      'set_config role, false',
      "SELECT set_config('role', $1, false)",
      "set_config('role', …, false)",
    ],
    [
      'set_config search_path, false',
      "select set_config('search_path', 'app', false)",
      "set_config('search_path', …, false)",
    ],
    [
      'set_config, a name in capitals',
      "SELECT set_config('ROLE', 'app', FALSE)",
      "set_config('role', …, false)",
    ],
    [
      'set_config, false as a string',
      "SELECT set_config('role', 'app', 'f')",
      "set_config('role', …, false)",
    ],
    [
      'set_config, a call in its value',
      "SELECT pg_catalog.set_config('search_path', concat('a', ',b'), false)",
      "set_config('search_path', …, false)",
    ],
    // A transaction's defaults for the session: the library's statements would run so.
    [
      'SET default_transaction_isolation',
      "set default_transaction_isolation = 'serializable'",
      'SET default_transaction_isolation',
    ],
    [
      'SET SESSION default_transaction_read_only',
      'SET SESSION default_transaction_read_only TO on',
      'SET default_transaction_read_only',
    ],
    [
      'SET SESSION CHARACTERISTICS',
      'set session characteristics as transaction isolation level serializable',
      'SET SESSION CHARACTERISTICS',
    ],
    [
      'SET SESSION CHARACTERISTICS … READ ONLY',
      'SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY',
      'SET SESSION CHARACTERISTICS',
    ],
    [
      'set_config default_transaction_isolation, false',
      "SELECT set_config('default_transaction_isolation', 'serializable', false)",
      "set_config('default_transaction_isolation', …, false)",
    ],
    // Other spellings PostgreSQL reads as the same SET.
    [
      'UPDATE pg_settings',
      "UPDATE pg_settings SET setting = 'on' WHERE name = 'default_transaction_read_only'",
      'UPDATE pg_settings (default_transaction_read_only)',
    ],
    [
      'UPDATE pg_catalog.pg_settings of the role',
      "update pg_catalog.pg_settings set setting = 'app' where name = 'role'",
      'UPDATE pg_settings (role)',
    ],
    [
      'a U& name',
      'SET U&"default_transaction_read_only" = on',
      'SET default_transaction_read_only',
    ],
    ['a U& name with escapes', 'SET U&"r\\006Fle" TO app', 'SET ROLE'],
    [
      'set_config, false cast',
      "SELECT set_config('default_transaction_read_only', 'on', false::boolean)",
      "set_config('default_transaction_read_only', …, false)",
    ],
    [
      'set_config, false in parentheses',
      "SELECT set_config('role', 'app', (false))",
      "set_config('role', …, false)",
    ],
    [
      "set_config, an E'' name with escapes",
      "SELECT set_config(E'r\\x6fle', 'app', false)",
      "set_config('role', …, false)",
    ],
    [
      "set_config, a U&'' name with escapes",
      "SELECT set_config(U&'r\\006Fle', 'app', false)",
      "set_config('role', …, false)",
    ],
    // How strings are read: refused for the transaction too.
    [
      'SET LOCAL standard_conforming_strings',
      'SET LOCAL standard_conforming_strings = off',
      'SET standard_conforming_strings',
    ],
    [
      'set_config standard_conforming_strings',
      "SELECT set_config('standard_conforming_strings', 'off', true)",
      "set_config('standard_conforming_strings', …)",
    ],
    // The library's named statements, dropped under node-postgres.
    ['DEALLOCATE ALL', 'DEALLOCATE ALL', 'DEALLOCATE ALL'],
    ['DEALLOCATE PREPARE ALL', 'deallocate prepare all', 'DEALLOCATE ALL'],
    [
      'DEALLOCATE of a library statement',
      'DEALLOCATE idempotency_claim_v5',
      'DEALLOCATE idempotency_claim_v5',
    ],
    // What ends with the transaction, puts the default back, or cannot be read.
    ['DEALLOCATE of the app’s own statement', 'DEALLOCATE my_report', undefined],
    [
      'UPDATE pg_settings of another setting',
      "UPDATE pg_settings SET setting = '1s' WHERE name = 'statement_timeout'",
      undefined,
    ],
    ['DEALLOCATE of a statement named "ALL"', 'DEALLOCATE "ALL"', undefined],
    [
      'SET LOCAL default_transaction_isolation',
      "SET LOCAL default_transaction_isolation = 'serializable'",
      undefined,
    ],
    [
      'set_config default_transaction_isolation, true',
      "SELECT set_config('default_transaction_isolation', 'serializable', true)",
      undefined,
    ],
    ['SET LOCAL ROLE', 'SET LOCAL ROLE app', undefined],
    ['SET LOCAL search_path', 'SET LOCAL search_path TO app', undefined],
    ['SET LOCAL SESSION AUTHORIZATION', 'SET LOCAL SESSION AUTHORIZATION app', undefined],
    ['RESET ROLE', 'RESET ROLE', undefined],
    ['SET ROLE TO DEFAULT', 'SET ROLE TO DEFAULT', undefined],
    [
      'set_config in FROM',
      "SELECT * FROM set_config('role', 'app', false)",
      "set_config('role', …, false)",
    ],
    [
      'set_config, NOT true',
      "SELECT set_config('role', 'app', NOT true)",
      "set_config('role', …, false)",
    ],
    [
      'set_config, an expression',
      "SELECT set_config('role', 'app', 1 = 0)",
      "set_config('role', …)",
    ],
    [
      'set_config, session authorization',
      "SELECT set_config('session_authorization', 'app', false)",
      "set_config('session_authorization', …, false)",
    ],
    ['set_config of another schema', "SELECT app.set_config('role', 'x', false)", undefined],
    ['set_config, NOT false', "SELECT set_config('role', 'app', NOT false)", undefined],
    ['another setting', "SET statement_timeout = '1s'", undefined],

    ['SET TRANSACTION', 'SET TRANSACTION ISOLATION LEVEL SERIALIZABLE', undefined],
    ['set_config role, true', "SELECT set_config('role', $1, true)", undefined],
    ['set_config another setting', "SELECT set_config('app.user', $1, false)", undefined],
    // An is_local that cannot be read may be false: refused, with the remedy (write true).
    [
      'set_config, is_local a parameter',
      "SELECT set_config('role', $1, $2)",
      "set_config('role', …)",
    ],
    ['set_config, the name a parameter', 'SELECT set_config($1, $2, false)', undefined],
    ['a name in a string', "SELECT 'SET ROLE app'", undefined],
    ['a name in a comment', 'SELECT 1 /* SET ROLE app */', undefined],
    ['a column named role', 'UPDATE users SET role = $1 WHERE id = $2', undefined],
    ['CREATE SCHEMA', 'CREATE SCHEMA app', undefined],
    ['GRANT a role', 'GRANT app TO someone', undefined],
    ['not a string', { text: 'SET ROLE app' }, undefined],
  ])('%s: %p', (_name, sql, expected) => {
    expect(sessionSettingOf(sql)).toBe(expected);
  });
});

describe('isTransactionModeOnly', () => {
  it.each<[string, unknown, boolean]>([
    ['SET TRANSACTION READ ONLY', 'SET TRANSACTION READ ONLY', true],
    ['lower case, read write', 'set transaction read write', true],
    ['DEFERRABLE', 'SET TRANSACTION READ ONLY, DEFERRABLE', true],
    ['SET transaction_read_only', 'SET transaction_read_only = on', true],
    ['SET LOCAL transaction_read_only', 'SET LOCAL transaction_read_only TO true', true],
    // A level is the request's to take (see nestedControlOf); anything else is sent.
    ['with a level', 'SET TRANSACTION ISOLATION LEVEL SERIALIZABLE READ ONLY', false],
    ['SET SESSION CHARACTERISTICS', 'SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY', false],
    ['two statements', 'SET TRANSACTION READ ONLY; SELECT 1', false],
    ['set_config', "SELECT set_config('transaction_read_only', 'on', false)", true],
    ['set_config, true', "select pg_catalog.set_config('transaction_read_only', $1, true)", true],
    ['set_config and another', "SELECT set_config('transaction_read_only', 'on', false), 1", false],
    [
      'set_config with a FROM',
      "SELECT set_config('transaction_read_only', 'on', false) FROM t",
      false,
    ],
    ['set_config of another setting', "SELECT set_config('statement_timeout', '1s', true)", false],
    ['another setting', "SET LOCAL statement_timeout = '1s'", false],
    ['a string', "SELECT 'SET TRANSACTION READ ONLY'", false],
    ['not a string', { text: 'SET TRANSACTION READ ONLY' }, false],
  ])('%s', (_name, sql, expected) => {
    expect(isTransactionModeOnly(sql)).toBe(expected);
  });
});

describe('setsReadOnly', () => {
  it.each<[string, unknown, boolean]>([
    ['SET TRANSACTION READ ONLY', 'SET TRANSACTION READ ONLY', true],
    ['with a level', 'SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY', true],
    ['after a write', 'INSERT INTO t VALUES (1); SET TRANSACTION READ ONLY', true],
    ['before a read', 'SET TRANSACTION READ ONLY; SELECT 1', true],
    ['SET transaction_read_only', 'SET transaction_read_only = on', true],
    ['SET LOCAL, a parameter cannot be read', 'SET LOCAL transaction_read_only TO yes', true],
    ['set_config', "SELECT 1, set_config('transaction_read_only', 'on', false)", true],
    ['set_config, a parameter', "SELECT set_config('transaction_read_only', $1, true)", true],
    ['READ WRITE', 'SET TRANSACTION READ WRITE', false],
    ['off', 'SET transaction_read_only = off', false],
    ['set_config off', "SELECT set_config('transaction_read_only', 'off', true)", false],
    ['a level only', 'SET TRANSACTION ISOLATION LEVEL SERIALIZABLE', false],
    ['in a string', "SELECT 'SET TRANSACTION READ ONLY'", false],
    ['not a string', 42, false],
  ])('%s', (_name, sql, expected) => {
    expect(setsReadOnly(sql)).toBe(expected);
  });
});

describe('setsIdentity', () => {
  it.each<[string, unknown, boolean]>([
    ['SET LOCAL ROLE', 'set local role authenticated', true],
    ['SET LOCAL search_path', 'SET LOCAL search_path TO app', true],
    ['SET LOCAL SESSION AUTHORIZATION', 'SET LOCAL SESSION AUTHORIZATION app', true],
    ['set_config role, local', "select set_config('role', 'authenticated', true)", true],
    ['after a write', 'INSERT INTO t VALUES (1); SET LOCAL ROLE app', true],
    ['an escaped name', "select set_config(E'r\\x6fle', 'app', true)", true],
    ['another setting', "select set_config('request.user', 'alice', true)", false],
    ['SET LOCAL statement_timeout', "SET LOCAL statement_timeout = '1s'", false],
    ['a name in a string', "SELECT 'SET LOCAL ROLE app'", false],
    ['a name that cannot be read', 'select set_config($1, $2, true)', true],
    ['in FROM', "SELECT * FROM set_config('search_path', 'app', true)", true],
  ])('%s', (_name, sql, expected) => {
    expect(setsIdentity(sql)).toBe(expected);
  });
});

describe('setsForTransaction', () => {
  it.each<[string, string, boolean, unknown[]?]>([
    ['SET LOCAL search_path', 'SET LOCAL search_path TO tenant_acme', true],
    ['SET LOCAL ROLE', 'SET LOCAL ROLE tenant', true],
    ['SET LOCAL of a setting', "SET LOCAL statement_timeout = '300ms'", true],
    ['SET LOCAL … TO DEFAULT', 'SET LOCAL lock_timeout TO DEFAULT', true],
    ['set_config for the transaction', "SELECT set_config('app.tenant', 'acme', true)", true],
    ['set_config of the search path', "SELECT set_config('search_path', 'tenant_a', true)", true],
    ['its is_local a parameter', 'SELECT set_config($1, $2, $3)', true, ['app.t', 'a', true]],
    [
      'its is_local a parameter, false',
      'SELECT set_config($1, $2, $3)',
      false,
      ['a.t', 'a', false],
    ],
    ['after a read', 'SELECT 1; SET LOCAL search_path TO tenant_acme', true],
    ['last of two settings', "SET LOCAL a.b = '1'; SET LOCAL search_path TO t", true],
    [
      'read by a statement after it in its text (one implicit transaction)',
      "SET LOCAL app.actor = 'alice'; INSERT INTO e (actor) VALUES (current_setting('app.actor'))",
      false,
    ],
    [
      'set_config read after it in its text',
      "SELECT set_config('app.t', 'a', true); INSERT INTO e (t) VALUES (current_setting('app.t'))",
      false,
    ],
    ['a setting again after the write', "SET LOCAL a.b = '1'; SELECT 1; SET LOCAL a.b = '2'", true],
    ['a session SET', 'SET search_path TO tenant_acme', false],
    ['set_config for the session', "SELECT set_config('app.tenant', 'acme', false)", false],
    ['a read naming local', "SELECT 'local' AS word", false],
    ['a write', "INSERT INTO entries (tag) VALUES ('local')", false],
    // (A rest parameter: jest takes a parameter past a row's length for a `done` callback.)
  ])('%s', (...[, sql, expected, values]) => {
    expect(setsForTransaction(sql, values)).toBe(expected);
  });

  it.each([undefined, 42, { text: 'SET LOCAL a.b = 1' }])('not a text: %p', (sql) => {
    expect(setsForTransaction(sql)).toBe(false);
  });
});

describe('localSettingsOf', () => {
  beforeAll(() => sqlReaderReady());

  it.each<[string, string, string[], unknown[]?]>([
    ['SET LOCAL', "SET LOCAL statement_timeout = '300ms'", ['statement_timeout']],
    ['SET LOCAL … TO DEFAULT', 'SET LOCAL lock_timeout TO DEFAULT', ['lock_timeout']],
    [
      'a set_config for the transaction',
      "SELECT set_config('app.Tenant', $1, true)",
      ['app.tenant'],
    ],
    [
      'several, once each',
      "SET LOCAL work_mem = '64MB'; SELECT set_config('app.tenant', 'a', true), set_config('work_mem', '1MB', true)",
      ['work_mem', 'app.tenant'],
    ],
    ['a session SET (not the transaction’s)', "SET statement_timeout = '1s'", []],
    ['a set_config for the session', "SELECT set_config('app.tenant', 'a', false)", []],
    ['a set_config of a name not written', 'SELECT set_config($1, $2, true)', []],
    [
      'its name and is_local parameters (Prisma’s, Drizzle’s templates)',
      'SELECT set_config($1, $2, $3)',
      ['app.tenant'],
      ['app.tenant', 'acme', true],
    ],
    [
      'is_local a parameter, as text and cast',
      "SELECT set_config('app.a', $1, $2::boolean), set_config('app.b', $1, $3)",
      ['app.a'],
      ['x', 'on', 'false'],
    ],
    ['is_local a parameter not sent', "SELECT set_config('app.a', 'x', $1)", [], []],
    ['a parameter that is no name', 'SELECT set_config($1, $2, true)', [], [{}, 'x']],
    ['its modes (ended by a RELEASE)', 'SET LOCAL transaction_read_only = on', []],
    ['the role (kept and put back apart)', 'SET LOCAL ROLE app_user', []],
    ['the search path', "SELECT set_config('search_path', 'app', true)", []],
    ['a write', 'INSERT INTO t VALUES (1)', []],
    // (A rest parameter: jest takes a parameter past a row's length for a `done` callback.)
  ])('%s', (...[, sql, expected, values]) => {
    expect(localSettingsOf(sql, values)).toEqual(expected);
  });
});

describe('sessionSettingsOf', () => {
  beforeAll(() => sqlReaderReady());

  it.each<[string, string, string[], unknown[]?]>([
    ['a session SET of a custom setting', "SET app.actor = 'audit'", ['app.actor']],
    ['SET SESSION', "SET SESSION statement_timeout = '1s'", ['statement_timeout']],
    ['SET … TO DEFAULT', 'SET lock_timeout TO DEFAULT', ['lock_timeout']],
    ['RESET', 'RESET app.actor', ['app.actor']],
    ['a set_config for the session', "SELECT set_config('App.Actor', 'a', false)", ['app.actor']],
    [
      'is_local a parameter',
      "SELECT set_config('app.a', $1, $2), set_config('app.b', $1, $3)",
      ['app.a'],
      ['x', false, true],
    ],
    ['SET LOCAL (the transaction’s)', "SET LOCAL app.actor = 'audit'", []],
    ['a set_config for the transaction', "SELECT set_config('app.actor', 'a', true)", []],
    ['is_local not readable', "SELECT set_config('app.a', 'x', flag) FROM t", []],
    ['RESET ALL (names none)', 'RESET ALL', []],
    ['the role (refused, or put back apart)', 'RESET ROLE', []],
    ['a transaction mode', 'SET TRANSACTION READ ONLY', []],
    ['a write', 'INSERT INTO t VALUES (1)', []],
  ])('%s', (...[, sql, expected, values]) => {
    expect(sessionSettingsOf(sql, values)).toEqual(expected);
  });
});

describe('commitEndsOf', () => {
  beforeAll(() => sqlReaderReady());

  it.each<[string, string, ReturnType<typeof commitEndsOf>]>([
    [
      'a temporary table ON COMMIT DROP',
      'CREATE TEMP TABLE t (a int) ON COMMIT DROP',
      { tempTables: [{ name: 't', action: 'drop' }], cursors: [] },
    ],
    [
      'pg_temp.name ON COMMIT DELETE ROWS',
      'CREATE TABLE pg_temp.t (a int) ON COMMIT DELETE ROWS',
      { tempTables: [{ name: 't', action: 'delete' }], cursors: [] },
    ],
    [
      'made again without an action: kept',
      'DROP TABLE t; CREATE TEMP TABLE t (a int)',
      {
        tempTables: [
          { name: 't', action: 'keep' },
          { name: 't', action: 'keep' },
        ],
        cursors: [],
      },
    ],
    [
      'IF NOT EXISTS without an action: the existing one’s stands',
      'CREATE TEMP TABLE IF NOT EXISTS t (a int)',
      { tempTables: [], cursors: [] },
    ],
    [
      'AS … ON COMMIT DROP',
      'CREATE TEMP TABLE t ON COMMIT DROP AS SELECT 1',
      { tempTables: [{ name: 't', action: 'drop' }], cursors: [] },
    ],
    ['a plain table', 'CREATE TABLE t (a int)', { tempTables: [], cursors: [] }],
    [
      'renamed (its action goes with it)',
      'ALTER TABLE t_staging RENAME TO t',
      { tempTables: [], cursors: [], renames: [{ from: 't_staging', to: 't' }] },
    ],
    [
      'dropped (IF EXISTS, pg_temp.name): no longer ended',
      'DROP TABLE IF EXISTS t, pg_temp.u, app.v',
      {
        tempTables: [
          { name: 't', action: 'keep' },
          { name: 'u', action: 'keep' },
        ],
        cursors: [],
      },
    ],
    [
      'SELECT … INTO TEMP (no action)',
      'SELECT 1 AS a INTO TEMP t',
      { tempTables: [{ name: 't', action: 'keep' }], cursors: [] },
    ],
    [
      'a cursor, and one WITH HOLD (not ended)',
      'DECLARE c CURSOR FOR SELECT 1; DECLARE h CURSOR WITH HOLD FOR SELECT 1',
      { tempTables: [], cursors: ['c'] },
    ],
  ])('%s', (_name, sql, expected) => {
    expect(commitEndsOf(sql)).toEqual(expected);
  });
});

describe('savepointControlsOf', () => {
  const savepoint = (name: string): SavepointControl => ({ kind: 'savepoint', name });
  it.each<[string, unknown, (SavepointControl | null)[] | undefined]>([
    ['Drizzle’s', 'savepoint sp0', [savepoint('sp0')]],
    ['Kysely’s, quoted', 'savepoint "Sp 1"', [savepoint('Sp 1')]],
    ['RELEASE SAVEPOINT', 'release savepoint sp0', [{ kind: 'release', name: 'sp0' }]],
    ['RELEASE alone', 'RELEASE sp0', [{ kind: 'release', name: 'sp0' }]],
    ['ROLLBACK TO SAVEPOINT', 'rollback to savepoint sp0', [{ kind: 'rollback-to', name: 'sp0' }]],
    ['ROLLBACK TO', 'ROLLBACK TO "sp0"', [{ kind: 'rollback-to', name: 'sp0' }]],
    ['a comment first', '-- optional\n  SAVEPOINT coupon', [savepoint('coupon')]],
    ['a block comment first', '/* why */ ROLLBACK TO x', [{ kind: 'rollback-to', name: 'x' }]],
    ['two statements', 'SAVEPOINT a; SAVEPOINT b', [savepoint('a'), savepoint('b')]],
    ['with a write after', 'SAVEPOINT a; INSERT INTO t VALUES (1)', [savepoint('a'), null]],
    [
      'rolled back and released',
      'ROLLBACK TO SAVEPOINT a; RELEASE SAVEPOINT a',
      [
        { kind: 'rollback-to', name: 'a' },
        { kind: 'release', name: 'a' },
      ],
    ],
    ['ROLLBACK', 'ROLLBACK', undefined],
    ['a write', "INSERT INTO t VALUES ('savepoint a')", undefined],
    ['a quoted name', 'SELECT "savepoint" FROM t', undefined],
    ['not text', { text: 'SAVEPOINT a' }, undefined],
  ])('%s', (_name, sql, expected) => {
    expect(savepointControlsOf(sql)).toEqual(expected);
  });
});

describe('statementStepsOf', () => {
  const plain = { control: null, identity: false, settings: false };
  const tenant = { control: null, identity: false, settings: true };
  const role = { control: null, identity: true, settings: false };
  const step = (kind: SavepointControl['kind'], name: string) => ({
    control: { kind, name },
    identity: false,
    settings: false,
  });
  it.each<[string, unknown, unknown[] | undefined, StatementStep[]]>([
    ['a write', 'INSERT INTO t VALUES (1)', undefined, [plain]],
    ['a setting alone', "SELECT set_config('app.tenant', 'acme', true)", undefined, [tenant]],
    [
      'a setting from its parameters (its name unread by setsIdentity: may be the role)',
      'SELECT set_config($1, $2, $3)',
      ['app.tenant', 'acme', true],
      [{ control: null, identity: true, settings: true }],
    ],
    [
      'settings without a savepoint statement: one step',
      "SET LOCAL ROLE app; SELECT set_config('app.tenant', 'a', true)",
      undefined,
      [{ control: null, identity: true, settings: true }],
    ],
    [
      'SAVEPOINT, then the tenant: the tenant is inside it',
      "SAVEPOINT as_tenant; SELECT set_config('app.tenant', 'acme', true)",
      undefined,
      [step('savepoint', 'as_tenant'), tenant],
    ],
    [
      'ROLLBACK TO, RELEASE, then the tenant: the tenant is in the one around',
      "ROLLBACK TO SAVEPOINT s; RELEASE SAVEPOINT s; SELECT set_config('app.tenant', 'acme', true)",
      undefined,
      [step('rollback-to', 's'), step('release', 's'), tenant],
    ],
    [
      'a role, then a savepoint',
      'SET LOCAL ROLE app; SAVEPOINT a; INSERT INTO t VALUES (1)',
      undefined,
      [role, step('savepoint', 'a'), plain],
    ],
    ['an empty text', '', undefined, [plain]],
    ['not text', { text: 'SAVEPOINT a' }, undefined, [plain]],
  ])('%s', (_name, sql, values, expected) => {
    expect(statementStepsOf(sql, values)).toEqual(expected);
  });
});

describe('rollsBackToSavepoint', () => {
  it.each<[string, unknown, boolean]>([
    ['ROLLBACK TO SAVEPOINT', 'ROLLBACK TO SAVEPOINT fuzz_1', true],
    ['without SAVEPOINT', 'rollback to s1', true],
    ['ROLLBACK WORK TO', 'ROLLBACK WORK TO SAVEPOINT s1', true],
    ['then RELEASE', 'ROLLBACK TO SAVEPOINT s; RELEASE SAVEPOINT s', true],
    ['after a statement', 'SELECT 1; ROLLBACK TO SAVEPOINT s', true],
    ['ROLLBACK', 'ROLLBACK', false],
    ['RELEASE', 'RELEASE SAVEPOINT s', false],
    ['in a string', "SELECT 'rollback to savepoint s'", false],
    ['not text', { text: 'ROLLBACK TO SAVEPOINT s' }, false],
  ])('%s', (_name, sql, expected) => {
    expect(rollsBackToSavepoint(sql)).toBe(expected);
  });
});
