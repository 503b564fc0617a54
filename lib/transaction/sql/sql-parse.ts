import { loadModule, parseSync, scanSync } from 'libpg-query';
import { condensed } from './sql-condense.js';

/**
 * The statements of a text as PostgreSQL's own parser reads them (libpg-query: the server's
 * grammar and lexer compiled to WebAssembly). The library reads what a handler sends to keep
 * it inside the request's transaction; a reader of its own missed spellings PostgreSQL accepts
 * (escapes in `E''` and `U&''` strings, `U&""` names, `begin atomic` as a column and its
 * alias), and each one let a `COMMIT` or a session setting through. The parser reads every
 * spelling as the server does, with `standard_conforming_strings` on (a handler's change of it
 * is refused: see `sessionSettingOf`).
 */

/** A node of the parse tree: `{ SelectStmt: { … } }`, as libpg-query gives it. */
export type SqlNode = Record<string, unknown>;

/** One statement of a text: its node, and where it stands in the text. */
export interface ParsedStatement {
  node: SqlNode;
  /** The statement's own text (from its first token), for a message. */
  text: string;
}

// Loaded as soon as the library is imported; IdempotencyModule's start-up awaits it, so that
// no request is read before it is (see `SqlReaderLoader`).
let loaded = false;
const loading = loadModule().then(() => {
  loaded = true;
});

/** Resolves once the parser can read: awaited at start-up, and by tests that read SQL. */
export function sqlReaderReady(): Promise<void> {
  return loading;
}

/** Texts longer than this are parsed every time: an ORM's statements are far shorter. */
const REMEMBERED_LENGTH = 4096;
/** At most this many texts remembered; past it, the memory starts again empty. */
const REMEMBERED_TEXTS = 2048;
/** A text the parser refused, with its words. */
export interface ParseRefusal {
  refused: string;
}
type Parse = ParsedStatement[] | ParseRefusal;
const remembered = new Map<string, Parse>();
/** The last text too long to remember among the others. */
let lastLong: { sql: string; parse: Parse } | undefined;

/**
 * The statements of `sql` (empty ones left out), or null when the parser refuses the text as a
 * whole (see `unreadableOf` for what that may hide).
 */
export function parsedStatements(sql: string): ParsedStatement[] | null {
  const result = parseOf(sql);
  return Array.isArray(result) ? result : null;
}

/**
 * The text's parse, remembered: an ORM sends the same texts again and again (its values
 * apart). A long text (a bulk INSERT) is read by several checks as it is sent: parsed once.
 */
function parseOf(sql: string): Parse {
  if (sql.length > REMEMBERED_LENGTH) {
    if (lastLong?.sql !== sql) lastLong = { sql, parse: parse(condensed(sql)) };
    return lastLong.parse;
  }
  let result = remembered.get(sql);
  if (result === undefined) {
    result = parse(sql);
    if (remembered.size >= REMEMBERED_TEXTS) remembered.clear();
    remembered.set(sql, result);
  }
  return result;
}

/** The first words of a statement that starts or ends a transaction, or sets what outlives it. */
const RISKY_FIRST_WORDS = new Set([
  'begin',
  'start',
  'commit',
  'end',
  'rollback',
  'abort',
  'prepare',
  'set',
  'deallocate',
]);
/** Words whose call or table changes the session wherever they stand. */
const RISKY_WORDS = /^(set_config|pg_settings|pg_(try_)?advisory_(lock|unlock)\w*)$/;

/**
 * Why a text the parser refuses must not be sent, or undefined. The parser is PostgreSQL 18's
 * grammar; an older server may run what it refuses (a name that PostgreSQL 16 and later
 * reserve, such as `system_user` in a column list), and then no check could see a `COMMIT` or
 * a `SET ROLE` in it. Such a text is let through only when PostgreSQL's lexer (the same in
 * every version) shows one statement that starts no transaction command or `SET`, and names
 * no `set_config`, `pg_settings` or advisory lock: at worst it runs as the handler meant.
 * Undefined too when the lexer refuses it (an unterminated string): the server refuses it as
 * well, before running any of it.
 */
export function unreadableOf(sql: unknown): string | undefined {
  if (typeof sql !== 'string') return undefined;
  // The hot path: one statement (no `;` at all) that begins with a word not among the risky
  // ones and names none of the risky calls cannot be risky, whether it parses or not.
  const first = /^\s*([a-z]+)/i.exec(sql)?.[1].toLowerCase();
  if (
    first !== undefined &&
    !RISKY_FIRST_WORDS.has(first) &&
    !/;|set_config|pg_settings|advisory|u&/i.test(sql)
  ) {
    return undefined;
  }
  // Nor can a text in which none of those words stands anywhere: none of its statements
  // begins with one (a keyword is never escaped or quoted), however many there are.
  if (
    !/\b(begin|start|commit|end|rollback|abort|prepare|set|deallocate)\b|set_config|pg_settings|advisory|u&/i.test(
      sql,
    )
  ) {
    return undefined;
  }
  const result = parseOf(sql);
  if (Array.isArray(result)) return undefined;
  let tokens: { text: string; tokenName: string }[];
  try {
    tokens = scanSync(sql).tokens;
  } catch {
    return undefined;
  }
  const statements: string[][] = [[]];
  for (const token of tokens) {
    if (token.tokenName === 'SQL_COMMENT' || token.tokenName === 'C_COMMENT') continue;
    if (token.tokenName === 'ASCII_59') statements.push([]);
    else statements[statements.length - 1].push(token.text.replace(/^"|"$/g, '').toLowerCase());
  }
  const nonEmpty = statements.filter((words) => words.length > 0);
  const risky =
    nonEmpty.length > 1 ||
    RISKY_FIRST_WORDS.has(nonEmpty[0]?.[0] ?? '') ||
    nonEmpty.some((words) => words.some((word) => RISKY_WORDS.test(word) || word.startsWith('u&')));
  return risky ? result.refused : undefined;
}

function parse(sql: string): Parse {
  if (!loaded) {
    throw new Error(
      "The SQL reader is not loaded yet: IdempotencyModule's start-up loads it (await " +
        'sqlReaderReady() before reading SQL outside a Nest application).',
    );
  }
  let stmts: { stmt?: SqlNode; stmt_location?: number; stmt_len?: number }[];
  try {
    stmts = (parseSync(sql) as { stmts?: typeof stmts }).stmts ?? [];
  } catch (error) {
    return { refused: error instanceof Error ? error.message : String(error) };
  }
  const bytes = Buffer.from(sql, 'utf8');
  return stmts
    .filter((entry) => entry.stmt !== undefined)
    .map((entry) => {
      // Locations are byte offsets into the UTF-8 text.
      const from = entry.stmt_location ?? 0;
      const to = entry.stmt_len ? from + entry.stmt_len : bytes.length;
      return { node: entry.stmt!, text: bytes.subarray(from, to).toString('utf8').trim() };
    });
}

/** A word of a text as PostgreSQL's lexer reads it, with its byte offsets in the UTF-8 text. */
export interface SqlToken {
  start: number;
  end: number;
  text: string;
}

/**
 * The tokens of `sql` without its comments, as PostgreSQL's lexer reads them (a `/* … *\/`
 * comment nests, a `--` one runs to the end of its line); undefined when the lexer refuses the
 * text (an unterminated string).
 */
export function tokensOf(sql: string): SqlToken[] | undefined {
  try {
    return scanSync(sql)
      .tokens.filter(
        (token) => token.tokenName !== 'SQL_COMMENT' && token.tokenName !== 'C_COMMENT',
      )
      .map(({ start, end, text }) => ({ start, end, text }));
  } catch {
    return undefined;
  }
}

/** The type of a node (`SelectStmt`) and its fields; undefined for anything that is not one. */
export function nodeOf(value: unknown): [string, SqlNode] | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const keys = Object.keys(value);
  if (keys.length !== 1) return undefined;
  const body = (value as SqlNode)[keys[0]];
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined;
  return [keys[0], body as SqlNode];
}

/**
 * Every node under `root` (itself included), depth first: `visit` is called with each node's
 * type and fields. Function bodies held as strings (`DO $$…$$`, `CREATE FUNCTION … AS '…'`)
 * are strings here, not statements: what runs inside them cannot be seen.
 */
export function walk(root: unknown, visit: (type: string, body: SqlNode) => void): void {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (value === null || typeof value !== 'object') continue;
    if (Array.isArray(value)) {
      for (const item of value) stack.push(item);
      continue;
    }
    const node = nodeOf(value);
    if (node) visit(node[0], node[1]);
    for (const child of Object.values(value)) {
      if (child !== null && typeof child === 'object') stack.push(child);
    }
  }
}

/**
 * A name as the tree spells it, a list of `String` nodes (`pg_catalog.lower`, `money2`,
 * `OPERATOR(pg_catalog.=)`): its last part, and the schema before it if one is written.
 */
export function qualifiedName(parts: unknown): { name: string; schema?: string } {
  const strings = ((parts as unknown[] | undefined) ?? []).map(
    (part) => (nodeOf(part)?.[1].sval as string | undefined) ?? '',
  );
  const name = strings[strings.length - 1] ?? '';
  return strings.length > 1 ? { name, schema: strings[strings.length - 2] } : { name };
}

/** A function call's name as PostgreSQL resolves it: its last part, and its schema if any. */
export function functionName(call: SqlNode): { name: string; schema?: string } {
  return qualifiedName(call.funcname);
}

/** A constant as the parser gives it: a string, a boolean, a number; undefined for others. */
export type Literal = string | boolean | number;

/**
 * The value of an argument that is one constant, through casts (`false::boolean`) and `NOT`
 * (parentheses are gone in the tree); undefined for a parameter, a column, any other
 * expression.
 */
export function literalOf(value: unknown): Literal | undefined {
  const node = nodeOf(value);
  if (!node) return undefined;
  const [type, body] = node;
  if (type === 'TypeCast') return literalOf(body.arg);
  if (type === 'BoolExpr' && body.boolop === 'NOT_EXPR') {
    const inner = literalOf((body.args as unknown[])?.[0]);
    const truth = typeof inner === 'boolean' ? inner : booleanOf(inner);
    return truth === undefined ? undefined : !truth;
  }
  if (type !== 'A_Const') return undefined;
  if (body.isnull) return undefined;
  if (body.sval) return ((body.sval as SqlNode).sval as string | undefined) ?? '';
  if (body.boolval) return (body.boolval as SqlNode).boolval === true;
  if (body.ival) return ((body.ival as SqlNode).ival as number | undefined) ?? 0;
  if (body.fval) return Number((body.fval as SqlNode).fval);
  return undefined;
}

/**
 * The value of an argument that is one constant (`literalOf`) or one parameter (`$2`, through
 * casts: `$2::boolean`), the parameter's read from the statement's `values` as node-postgres
 * sends them (a boolean, a number or a string; anything else, or a missing value: undefined).
 */
export function boundOf(value: unknown, values?: readonly unknown[]): Literal | undefined {
  const literal = literalOf(value);
  if (literal !== undefined || !values) return literal;
  const node = nodeOf(value);
  if (!node) return undefined;
  const [type, body] = node;
  if (type === 'TypeCast') return boundOf(body.arg, values);
  if (type !== 'ParamRef') return undefined;
  const bound = values[((body.number as number | undefined) ?? 0) - 1];
  return typeof bound === 'string' || typeof bound === 'boolean' || typeof bound === 'number'
    ? bound
    : undefined;
}

/** How PostgreSQL reads a string or number as a boolean (`'f'`, `'off'`, `0`…). */
export function booleanOf(value: Literal | undefined): boolean | undefined {
  if (typeof value === 'boolean') return value;
  if (typeof value === 'number') return value !== 0;
  if (typeof value !== 'string') return undefined;
  const text = value.trim().toLowerCase();
  if (['t', 'tr', 'tru', 'true', 'y', 'ye', 'yes', 'on', '1'].includes(text)) return true;
  if (['f', 'fa', 'fal', 'fals', 'false', 'n', 'no', 'off', '0'].includes(text)) return false;
  return undefined;
}
