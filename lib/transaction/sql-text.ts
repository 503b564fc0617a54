/**
 * What the request's transaction needs to know of a statement's text before it sends it:
 * whether it is provably one plain read (which may run apart, before the transaction opens),
 * and whether it would end or start a transaction (which must never reach the request's
 * connection). Read with a small lexer, not a regular expression over the whole text, so
 * that a keyword inside a string, a quoted name, a comment or a dollar-quoted body is never
 * taken for one, and a second statement after a `;` is never missed.
 */

/** A word (keyword or unquoted name, lower-cased), a quoted name, or one punctuation mark. */
interface Token {
  kind: 'word' | 'quoted' | 'punct';
  text: string;
  /** A string's (or dollar-quoted body's) content; its `text` is a lone `'`. */
  value?: string;
}

/**
 * The statements of `sql`, each as its tokens; empty statements (a trailing `;`) are left
 * out. Strings (`'…'`, `E'…'`) and dollar-quoted bodies are skipped whole, comments too
 * (block comments nest, as in PostgreSQL).
 */
export function statementsOf(sql: string): Token[][] {
  const statements: Token[][] = [];
  let current: Token[] = [];
  /** Open `BEGIN ATOMIC` bodies (a SQL-standard function body): their `;` do not split. */
  let atomic = 0;
  /** Open `CASE` inside such a body: its `END` is not the body's. */
  let cases = 0;
  let i = 0;
  const n = sql.length;
  while (i < n) {
    const c = sql[i];
    if (/\s/.test(c)) {
      i++;
    } else if (c === '-' && sql[i + 1] === '-') {
      while (i < n && sql[i] !== '\n') i++;
    } else if (c === '/' && sql[i + 1] === '*') {
      let depth = 1;
      i += 2;
      while (i < n && depth > 0) {
        const pair = sql.slice(i, i + 2);
        if (pair === '/*' || pair === '*/') {
          depth += pair === '/*' ? 1 : -1;
          i += 2;
        } else {
          i++;
        }
      }
    } else if (c === "'") {
      const end = skipString(sql, i + 1, /* backslashEscapes */ false);
      current.push({ kind: 'punct', text: "'", value: unquote(sql.slice(i + 1, end - 1)) });
      i = end;
    } else if ((c === 'e' || c === 'E') && sql[i + 1] === "'") {
      const end = skipString(sql, i + 2, true);
      current.push({ kind: 'punct', text: "'", value: unescapeString(sql.slice(i + 2, end - 1)) });
      i = end;
    } else if ((c === 'u' || c === 'U') && sql[i + 1] === '&' && sql[i + 2] === "'") {
      const end = skipString(sql, i + 3, false);
      const value = unicodeEscaped(unquote(sql.slice(i + 3, end - 1)));
      current.push({ kind: 'punct', text: "'", value });
      i = end;
    } else if ((c === 'u' || c === 'U') && sql[i + 1] === '&' && sql[i + 2] === '"') {
      // A quoted name with Unicode escapes (U&"d\0061ta"): the name PostgreSQL reads.
      let j = i + 3;
      let name = '';
      while (j < n && !(sql[j] === '"' && sql[j + 1] !== '"')) {
        name += sql[j] === '"' ? '"' : sql[j];
        j += sql[j] === '"' ? 2 : 1;
      }
      current.push({ kind: 'quoted', text: unicodeEscaped(name) });
      i = j + 1;
    } else if (c === '"') {
      let j = i + 1;
      let name = '';
      while (j < n) {
        if (sql[j] === '"' && sql[j + 1] === '"') {
          name += '"';
          j += 2;
        } else if (sql[j] === '"') {
          break;
        } else {
          name += sql[j++];
        }
      }
      current.push({ kind: 'quoted', text: name });
      i = j + 1;
    } else if (c === '$' && /^\$([A-Za-z_][A-Za-z0-9_]*)?\$/.test(sql.slice(i))) {
      const tag = /^\$([A-Za-z_][A-Za-z0-9_]*)?\$/.exec(sql.slice(i))![0];
      const end = sql.indexOf(tag, i + tag.length);
      const value = sql.slice(i + tag.length, end < 0 ? n : end);
      i = end < 0 ? n : end + tag.length;
      current.push({ kind: 'punct', text: "'", value });
    } else if (/[A-Za-z_\u0080-\uffff]/.test(c)) {
      let j = i + 1;
      while (j < n && /[A-Za-z0-9_$\u0080-\uffff]/.test(sql[j])) j++;
      const word = sql.slice(i, j).toLowerCase();
      const previous = current[current.length - 1];
      // A body of SQL-standard statements, whose `;` do not end the statement: only in a
      // CREATE FUNCTION or PROCEDURE (elsewhere `begin atomic` may be a column and its alias).
      const creating = current[0]?.kind === 'word' && current[0].text === 'create';
      if (word === 'atomic' && creating && previous?.kind === 'word' && previous.text === 'begin') {
        atomic++;
      } else if (atomic > 0 && word === 'case') cases++;
      else if (atomic > 0 && word === 'end') {
        if (cases > 0) cases--;
        else atomic--;
      }
      current.push({ kind: 'word', text: word });
      i = j;
    } else if (c === ';' && atomic === 0) {
      if (current.length > 0) statements.push(current);
      current = [];
      i++;
    } else {
      current.push({ kind: 'punct', text: c });
      i++;
    }
  }
  if (current.length > 0) statements.push(current);
  return statements;
}

/** A string's content as PostgreSQL reads it, for the plain strings a setting's name is. */
function unquote(body: string): string {
  return body.replace(/''/g, "'");
}

const C_ESCAPES: Record<string, string> = { b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/** An `E'…'` string's content: its backslash escapes as PostgreSQL reads them. */
function unescapeString(body: string): string {
  return body.replace(
    /''|\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)/gs,
    (match: string, escape?: string) => {
      if (escape === undefined) return "'";
      if (/^x/.test(escape)) return String.fromCharCode(parseInt(escape.slice(1), 16));
      if (/^[0-7]/.test(escape)) return String.fromCharCode(parseInt(escape, 8));
      if (/^[uU][0-9A-Fa-f]/.test(escape) && escape.length > 1) {
        return String.fromCodePoint(parseInt(escape.slice(1), 16));
      }
      return C_ESCAPES[escape] ?? escape;
    },
  );
}

function skipString(sql: string, from: number, backslashEscapes: boolean): number {
  let i = from;
  while (i < sql.length) {
    if (backslashEscapes && sql[i] === '\\') i += 2;
    else if (sql[i] === "'" && sql[i + 1] === "'") i += 2;
    else if (sql[i] === "'") return i + 1;
    else i++;
  }
  return i;
}

/**
 * Words that may stand before `(` without calling a function: keywords of the grammar
 * (`IN (`, `EXISTS (`, `FROM (SELECT …)`) and the aggregates and functions of PostgreSQL that
 * have no effect beyond their result and take no lock (what TypeORM's reads and counts use).
 * Anything else followed by `(` may be a function of the app's that writes.
 */
// prettier-ignore
const SAFE_BEFORE_PARENTHESIS = new Set([
  // keywords
  'select', 'from', 'where', 'and', 'or', 'not', 'in', 'exists', 'any', 'all', 'some', 'on',
  'join', 'using', 'as', 'distinct', 'values', 'array', 'row', 'cast', 'over', 'partition',
  'filter', 'within', 'group', 'by', 'order', 'having', 'limit', 'offset', 'case', 'when',
  'then', 'else', 'is', 'like', 'ilike', 'between', 'union', 'intersect', 'except', 'lateral',
  'only', 'with', 'interval', 'varchar', 'numeric', 'decimal', 'char', 'character', 'timestamp',
  'time', 'bit', 'float', 'extract', 'position', 'substring', 'trim', 'overlay', 'collate',
  'asc', 'desc', 'nulls', 'first', 'last', 'fetch', 'next', 'rows', 'inner', 'left', 'right',
  'full', 'outer', 'cross', 'natural', 'escape', 'similar', 'to',
  // functions without effects
  'count', 'sum', 'avg', 'min', 'max', 'coalesce', 'nullif', 'greatest', 'least', 'lower',
  'upper', 'length', 'char_length', 'octet_length', 'concat', 'concat_ws', 'replace', 'abs',
  'round', 'floor', 'ceil', 'ceiling', 'mod', 'power', 'sqrt', 'array_agg', 'string_agg',
  'json_agg', 'jsonb_agg', 'json_build_object', 'jsonb_build_object', 'json_build_array',
  'jsonb_build_array', 'json_object_agg', 'jsonb_object_agg', 'to_json', 'to_jsonb',
  'row_to_json', 'bool_and', 'bool_or', 'every', 'row_number', 'rank', 'dense_rank', 'lag',
  'lead', 'date_trunc', 'date_part', 'to_char', 'to_date', 'to_timestamp', 'now',
  'array_length', 'cardinality', 'unnest', 'left', 'right', 'split_part', 'starts_with',
  'md5', 'encode', 'decode', 'format', 'jsonb_array_length', 'jsonb_typeof', 'age',
]);

/** Row-locking clauses: `FOR UPDATE`, `FOR NO KEY UPDATE`, `FOR SHARE`, `FOR KEY SHARE`. */
const LOCKING = new Set(['update', 'share', 'no', 'key']);

/**
 * Whether `sql` is provably one plain `SELECT`: one statement, beginning with `SELECT`, with
 * no row lock, no `INTO`, and no call of a function not known to be free of effects (one of
 * the app's may write, and PostgreSQL's own `nextval`, `set_config`, `pg_advisory_lock`,
 * `pg_notify` have effects that last). Only such a read may run before, and apart from, the
 * request's transaction; anything else opens it, which is always correct, only less lazy.
 */
export function isPlainRead(sql: unknown): boolean {
  if (typeof sql !== 'string') return false;
  // The hot path: every statement a handler sends before its first write comes here. One that
  // begins with a word other than SELECT is not one, whatever follows; and an ORM sends the
  // same texts again and again (its values go apart), so a read's answer is remembered.
  const first = /^\s*([a-z_]+)/i.exec(sql);
  if (first && first[1].toLowerCase() !== 'select') return false;
  return remembered(plainReads, sql, readsAsPlain);
}

function readsAsPlain(sql: string): boolean {
  const statements = statementsOf(sql);
  if (statements.length !== 1) return false;
  const [tokens] = statements;
  if (tokens[0].kind !== 'word' || tokens[0].text !== 'select') return false;
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i];
    const next = tokens[i + 1];
    if (token.kind === 'word' && token.text === 'into') return false;
    if (token.kind === 'word' && token.text === 'for' && next?.kind === 'word') {
      if (LOCKING.has(next.text)) return false;
    }
    if (next?.kind === 'punct' && next.text === '(') {
      if (token.kind === 'quoted') return false;
      if (token.kind === 'word' && !SAFE_BEFORE_PARENTHESIS.has(token.text)) return false;
    }
  }
  return true;
}

/** Texts longer than this are read every time: an ORM's statements are far shorter. */
const REMEMBERED_LENGTH = 4096;
/** At most this many texts remembered; past it, the memory starts again empty. */
const REMEMBERED_TEXTS = 512;
const plainReads = new Map<string, boolean>();

/** `read(sql)`, remembered in `memory` for texts an ORM repeats (bounded in count and length). */
function remembered(memory: Map<string, boolean>, sql: string, read: (sql: string) => boolean) {
  if (sql.length > REMEMBERED_LENGTH) return read(sql);
  let answer = memory.get(sql);
  if (answer === undefined) {
    answer = read(sql);
    if (memory.size >= REMEMBERED_TEXTS) memory.clear();
    memory.set(sql, answer);
  }
  return answer;
}

/**
 * The first statement of `sql` that would start or end a transaction block (`BEGIN`,
 * `START TRANSACTION`, `COMMIT`, `END`, `ROLLBACK`, `ABORT`, and the two-phase commands), as
 * its leading words in capitals; undefined when there is none. `ROLLBACK TO SAVEPOINT`,
 * `SAVEPOINT` and `RELEASE` stay inside the transaction and are not counted.
 */
export function transactionControlOf(sql: unknown): string | undefined {
  if (typeof sql !== 'string') return undefined;
  // The hot path: one statement that begins as a read or a write (TypeORM's every statement).
  if (!sql.includes(';') && /^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b/i.test(sql)) return undefined;
  for (const tokens of statementsOf(sql)) {
    const words = tokens.map((token) => (token.kind === 'word' ? token.text : ''));
    const [first, second, third] = words;
    const ends = ['commit', 'end', 'abort'].includes(first);
    const starts =
      first === 'begin' || (first === 'start' && second === 'transaction') || first === 'prepare';
    const rollsBack =
      first === 'rollback' &&
      !(second === 'to' || ((second === 'work' || second === 'transaction') && third === 'to'));
    if (first === 'prepare' && second !== 'transaction') continue;
    if (ends || starts || rollsBack) {
      return words
        .slice(0, first === 'start' || first === 'prepare' ? 2 : 1)
        .join(' ')
        .toUpperCase();
    }
  }
  return undefined;
}

/** What a nested transaction's own control statement asks of the request's transaction. */
export type NestedControl =
  | { kind: 'begin'; level?: string }
  | { kind: 'commit' }
  | { kind: 'rollback' }
  | { kind: 'set-isolation'; level: string };

/**
 * The transaction control a data layer sends on a connection it believes its own (Prisma,
 * Drizzle and Kysely open their transactions with `BEGIN` on a pooled connection), as one
 * statement: `BEGIN`/`START TRANSACTION` with any modes, `COMMIT`/`END`, `ROLLBACK`/`ABORT`,
 * and `SET TRANSACTION ISOLATION LEVEL`. The level comes in capitals (`REPEATABLE READ`).
 * Undefined for anything else, a chain (`COMMIT AND CHAIN`) or several statements; those are
 * left to `transactionControlOf`, which refuses what would end the request's transaction.
 */
export function nestedControlOf(sql: unknown): NestedControl | undefined {
  if (typeof sql !== 'string' || !/^\s*(begin|start|commit|end|rollback|abort|set)\b/i.test(sql)) {
    return undefined;
  }
  const statements = statementsOf(sql);
  if (statements.length !== 1) return undefined;
  const words = statements[0].map((token) => (token.kind === 'word' ? token.text : token.text));
  const [first, second] = words;
  const rest = (from: number) =>
    words.slice(['work', 'transaction'].includes(words[from]) ? from + 1 : from);
  if (first === 'begin' || (first === 'start' && second === 'transaction')) {
    const modes = rest(first === 'begin' ? 1 : 2);
    const level = isolationOf(modes);
    if (level === null) return undefined;
    return level ? { kind: 'begin', level } : { kind: 'begin' };
  }
  if (first === 'set' && second === 'transaction') {
    const level = isolationOf(words.slice(2));
    return level ? { kind: 'set-isolation', level } : undefined;
  }
  const tail = rest(1);
  const plain = tail.length === 0 || (tail.join(' ') === 'and no chain' && first !== 'abort');
  if (!plain) return undefined;
  if (first === 'commit' || first === 'end') return { kind: 'commit' };
  if (first === 'rollback' || first === 'abort') return { kind: 'rollback' };
  return undefined;
}

/**
 * The isolation level among a transaction's modes (`ISOLATION LEVEL SERIALIZABLE, READ
 * WRITE`), in capitals; undefined when none is named; null when the modes are not ones this
 * reads (left to PostgreSQL's own refusal, through `transactionControlOf`).
 */
function isolationOf(modes: string[]): string | undefined | null {
  let level: string | undefined;
  let i = 0;
  while (i < modes.length) {
    const word = modes[i];
    if (word === ',') {
      i++;
    } else if (word === 'isolation' && modes[i + 1] === 'level') {
      const one = modes[i + 2];
      const two = modes[i + 3];
      if (one === 'serializable') {
        level = 'SERIALIZABLE';
        i += 3;
      } else if (
        (one === 'repeatable' && two === 'read') ||
        (one === 'read' && (two === 'committed' || two === 'uncommitted'))
      ) {
        level = `${one} ${two}`.toUpperCase();
        i += 4;
      } else {
        return null;
      }
    } else if (word === 'read' && (modes[i + 1] === 'write' || modes[i + 1] === 'only')) {
      i += 2;
    } else if (word === 'deferrable') {
      i++;
    } else if (word === 'not' && modes[i + 1] === 'deferrable') {
      i += 2;
    } else {
      return null;
    }
  }
  return level;
}

/**
 * PostgreSQL's session-level advisory lock functions: a lock taken with one of them outlives
 * the transaction it was taken in, and its unlock takes effect at once, not at COMMIT. Their
 * `_xact_` variants (`pg_advisory_xact_lock`, `pg_try_advisory_xact_lock_shared`…) are not
 * here: those end with the transaction, as a handler's work in the request's must.
 */
// prettier-ignore
const SESSION_ADVISORY = new Set([
  'pg_advisory_lock', 'pg_advisory_lock_shared', 'pg_try_advisory_lock',
  'pg_try_advisory_lock_shared', 'pg_advisory_unlock', 'pg_advisory_unlock_shared',
  'pg_advisory_unlock_all',
]);

/**
 * The first session-level advisory lock function `sql` calls (`pg_advisory_lock`,
 * `pg_advisory_unlock`, their `_shared` and `try_` variants, `pg_advisory_unlock_all`),
 * lower-cased; undefined when it calls none. A name inside a string, a comment or a quoted
 * identifier that is not a call is not counted; a call made from inside a function body (a
 * `DO` block, a function of the app's) cannot be seen here.
 */
export function sessionAdvisoryLockOf(sql: unknown): string | undefined {
  // The hot path: almost no statement mentions an advisory lock at all.
  if (typeof sql !== 'string' || !/advisory/i.test(sql)) return undefined;
  for (const tokens of statementsOf(sql)) {
    for (let i = 0; i + 1 < tokens.length; i++) {
      const token = tokens[i];
      const next = tokens[i + 1];
      if (token.kind === 'punct' || next.kind !== 'punct' || next.text !== '(') continue;
      // A word is lower-cased already; a quoted name is exact, as PostgreSQL reads it.
      if (SESSION_ADVISORY.has(token.text)) return token.text;
    }
  }
  return undefined;
}

/**
 * Settings whose session-level value outlives the request on its pooled connection: the role
 * and search path (every later request runs with them), and the defaults a transaction begun
 * without a level takes (the library's own statements and later requests would run so).
 */
const SESSION_SETTINGS = new Set([
  'role',
  'search_path',
  'default_transaction_isolation',
  'default_transaction_read_only',
]);
/** How PostgreSQL may read a boolean `false` given as a string (`set_config`'s `is_local`). */
const FALSE_STRINGS = new Set(['false', 'f', 'off', 'no', 'n', '0']);

/**
 * The first statement of `sql` that changes, for the session rather than for the transaction,
 * what the library relies on: the role, the session authorization or the search path (`SET
 * ROLE`, `SET SESSION ROLE`, `SET SESSION AUTHORIZATION`, `SET search_path` or `SET SCHEMA`,
 * not `SET LOCAL`, and `set_config('role' | 'search_path', …, false)`); the defaults of a
 * transaction (`SET default_transaction_isolation`, `SET default_transaction_read_only`, `SET
 * SESSION CHARACTERISTICS AS TRANSACTION …` and their `set_config`); the named statements the
 * library has prepared on the connection (`DEALLOCATE ALL`, or one of its own names). As its
 * leading words (`SET ROLE`) or the call (`set_config('role', …, false)`); undefined when there
 * is none. Committed with the request's transaction, such a change stays with the pooled
 * connection after the request (a `DEALLOCATE` is not even transactional). `RESET` is not
 * counted (it puts the session's default back); nor a `set_config` whose name or `is_local`
 * is a parameter, which cannot be read here.
 */
export function sessionSettingOf(sql: unknown): string | undefined {
  // The hot path: almost no statement names any of these.
  if (
    typeof sql !== 'string' ||
    !/role|search_path|schema|authorization|set_config|default_transaction|characteristics|deallocate|pg_settings|u&|standard_conforming/i.test(
      sql,
    )
  ) {
    return undefined;
  }
  for (const tokens of statementsOf(sql)) {
    const set = setStatementOf(tokens) ?? deallocateOf(tokens) ?? settingsUpdateOf(tokens);
    if (set) return set;
    const call = sessionSetConfigOf(tokens);
    if (call) return call;
  }
  return undefined;
}

/** `SET [SESSION] ROLE | SESSION AUTHORIZATION | search_path | SCHEMA` (not LOCAL). */
function setStatementOf(tokens: Token[]): string | undefined {
  const words = tokens.map((token) => (token.kind === 'punct' ? '' : token.text.toLowerCase()));
  if (words[0] !== 'set' || tokens[0].kind !== 'word') return undefined;
  let i = 1;
  // How strings are read in SQL text, which the library reads (a COMMIT could hide in one):
  // refused for the transaction too.
  if (
    words[i + (words[i] === 'local' || words[i] === 'session' ? 1 : 0)] ===
    'standard_conforming_strings'
  ) {
    return 'SET standard_conforming_strings';
  }
  if (words[i] === 'local') return undefined;
  if (words[i] === 'session' && !['authorization', 'characteristics'].includes(words[i + 1])) {
    i++;
  }
  if (words[i] === 'role') return 'SET ROLE';
  if (words[i] === 'session' && words[i + 1] === 'authorization') {
    return 'SET SESSION AUTHORIZATION';
  }
  if (words[i] === 'search_path' || words[i] === 'schema') return 'SET search_path';
  if (
    words[i] === 'default_transaction_isolation' ||
    words[i] === 'default_transaction_read_only'
  ) {
    return `SET ${words[i]}`;
  }
  if (words[i] === 'session' && words[i + 1] === 'characteristics') {
    return 'SET SESSION CHARACTERISTICS';
  }
  return undefined;
}

/** A `U&` name's escapes (a backslash, then 4 or +6 hex digits, or a second backslash). */
function unicodeEscaped(name: string): string {
  return name.replace(/\\(\\|\+[0-9A-Fa-f]{6}|[0-9A-Fa-f]{4})/g, (_, escape: string) =>
    escape === '\\' ? '\\' : String.fromCodePoint(parseInt(escape.replace('+', ''), 16)),
  );
}

/**
 * Whether `sql` is one statement that makes the current transaction read only, or read-write,
 * without naming a level: `SET TRANSACTION READ ONLY` (its other modes too) or `SET [LOCAL]
 * transaction_read_only`. Sent through the pool (or a DataSource's `query()`) outside any
 * transaction, it does nothing; sent into the request's, it would make the transaction that
 * stores the answer read only.
 */
export function isTransactionModeOnly(sql: unknown): boolean {
  if (typeof sql !== 'string' || !/transaction/i.test(sql)) return false;
  const statements = statementsOf(sql);
  if (statements.length !== 1) return false;
  const words = statements[0].map((token) =>
    token.kind === 'punct' ? token.text : token.text.toLowerCase(),
  );
  if (words[0] !== 'set') return false;
  const i = words[1] === 'local' || words[1] === 'session' ? 2 : 1;
  if (words[i] === 'transaction_read_only') return true;
  return i === 1 && words[1] === 'transaction' && !words.includes('isolation');
}

/**
 * `UPDATE pg_settings … WHERE name = 'role'` (or another of `SESSION_SETTINGS`): PostgreSQL
 * reads it as the `SET` of that setting, for the session.
 */
function settingsUpdateOf(tokens: Token[]): string | undefined {
  const words = tokens.map((token) =>
    token.kind === 'punct' ? token.text : token.text.toLowerCase(),
  );
  if (words[0] !== 'update') return undefined;
  let i = words[1] === 'only' ? 2 : 1;
  if (words[i] === 'pg_catalog' && words[i + 1] === '.') i += 2;
  if (words[i] !== 'pg_settings') return undefined;
  const named = tokens.find(
    (token) => token.value !== undefined && SESSION_SETTINGS.has(token.value.toLowerCase()),
  );
  return named ? `UPDATE pg_settings (${named.value!.toLowerCase()})` : undefined;
}

/** The prefix of the library's own statements' names (postgres-statements.ts). */
const OWN_STATEMENT_PREFIX = 'idempotency_';

/** `DEALLOCATE [PREPARE] ALL`, or of a statement the library named. */
function deallocateOf(tokens: Token[]): string | undefined {
  const words = tokens.map((token) => (token.kind === 'punct' ? '' : token.text.toLowerCase()));
  if (words[0] !== 'deallocate' || tokens[0].kind !== 'word') return undefined;
  const name = words[1] === 'prepare' ? words[2] : words[1];
  if (name === 'all' && tokens[words[1] === 'prepare' ? 2 : 1].kind === 'word') {
    return 'DEALLOCATE ALL';
  }
  if (name?.startsWith(OWN_STATEMENT_PREFIX)) return `DEALLOCATE ${name}`;
  return undefined;
}

/** The settings that say who a statement runs as, and what its names find. */
const IDENTITY_SETTINGS = new Set(['role', 'search_path', 'session_authorization']);

/**
 * Whether `sql` sets, for its transaction, the role, the session authorization or the search
 * path: `SET LOCAL ROLE | SESSION AUTHORIZATION | search_path | SCHEMA`, or a `set_config` of
 * one of them (the RLS recipe's first statements).
 */
export function setsIdentity(sql: unknown): boolean {
  // An escaped name (E'r\\x6fle', U&'r\\006Fle') does not show its letters.
  if (typeof sql !== 'string' || !/role|search_path|schema|authorization|\\|u&/i.test(sql)) {
    return false;
  }
  return statementsOf(sql).some((tokens) => {
    const words = tokens.map((token) => (token.kind === 'punct' ? '' : token.text.toLowerCase()));
    if (words[0] === 'set' && words[1] === 'local') {
      return (
        ['role', 'search_path', 'schema'].includes(words[2]) ||
        (words[2] === 'session' && words[3] === 'authorization')
      );
    }
    return tokens.some((token, i) => {
      if (token.kind === 'punct' || token.text !== 'set_config') return false;
      if (tokens[i + 1]?.text !== '(') return false;
      const [name] = argumentsFrom(tokens, i + 2);
      const setting = name?.length === 1 ? name[0].value?.toLowerCase() : undefined;
      return setting !== undefined && IDENTITY_SETTINGS.has(setting);
    });
  });
}

/** A call `set_config('role' | 'search_path', …, false)`, as it reads in the message. */
function sessionSetConfigOf(tokens: Token[]): string | undefined {
  for (let i = 0; i + 1 < tokens.length; i++) {
    const token = tokens[i];
    if (token.kind === 'punct' || token.text !== 'set_config') continue;
    if (tokens[i + 1].text !== '(') continue;
    const args = argumentsFrom(tokens, i + 2);
    if (args.length !== 3) continue;
    const [name, , isLocal] = args;
    const setting = name.length === 1 ? name[0].value?.toLowerCase() : undefined;
    if (setting === 'standard_conforming_strings') return `set_config('${setting}', …)`;
    if (setting === undefined || !SESSION_SETTINGS.has(setting)) continue;
    const local = literalOf(isLocal);
    if (local === undefined) continue;
    const isFalse =
      (local.kind === 'word' && local.text === 'false') ||
      (local.value !== undefined && FALSE_STRINGS.has(local.value.trim().toLowerCase()));
    if (isFalse) return `set_config('${setting}', …, false)`;
  }
  return undefined;
}

/** An argument that is one value: in parentheses, with a cast (`(false)`, `false::boolean`). */
function literalOf(tokens: Token[]): Token | undefined {
  let rest = tokens;
  while (rest.length > 2 && rest[0].text === '(' && rest[rest.length - 1].text === ')') {
    rest = rest.slice(1, -1);
  }
  // `value :: type`: the lexer gives `::` as two `:`.
  if (rest.length === 4 && rest[1].text === ':' && rest[2].text === ':') rest = rest.slice(0, 1);
  return rest.length === 1 ? rest[0] : undefined;
}

/** A call's arguments, from the token after its `(`: each as its tokens, up to its `)`. */
function argumentsFrom(tokens: Token[], from: number): Token[][] {
  const args: Token[][] = [[]];
  let depth = 0;
  for (let i = from; i < tokens.length; i++) {
    const token = tokens[i];
    const punct = token.kind === 'punct' && token.value === undefined;
    if (punct && token.text === '(') depth++;
    if (punct && token.text === ')') {
      if (depth === 0) return args;
      depth--;
    }
    if (punct && token.text === ',' && depth === 0) args.push([]);
    else args[args.length - 1].push(token);
  }
  return [];
}
