import {
  booleanOf,
  boundOf,
  functionName,
  type Literal,
  literalOf,
  nodeOf,
  parsedStatements,
  type ParsedStatement,
  qualifiedName,
  type SqlNode,
  walk,
} from './sql-parse.js';
import {
  EFFECT_FREE_FUNCTIONS,
  isAppRelation,
  isAppType,
  isCatalogUnread,
  isColumnFunction,
  isShadowedFunction,
  isShadowedOperator,
  PLAIN_OPERATORS,
} from './shadowed-built-ins.js';

/**
 * What the request's transaction needs to know of a statement's text before it sends it:
 * whether it is provably one plain read (which may run apart, before the transaction opens),
 * whether it would end or start a transaction (which must never reach the request's
 * connection), and whether it changes what outlives the request on its pooled connection.
 * Read from PostgreSQL's own parse tree (`sql-parse.ts`), so that a keyword inside a string,
 * a quoted name, a comment or a dollar-quoted body is never taken for one, an escaped name
 * or string is read as the server reads it, and a second statement after a `;` is never
 * missed. A text PostgreSQL would refuse to parse runs none of its statements: nothing is
 * refused for it here, and the server's syntax error is the handler's answer.
 */

/** The statements of `sql` as PostgreSQL parses them; empty when it would refuse the text. */
export function statementsOf(sql: string): ParsedStatement[] {
  return parsedStatements(sql) ?? [];
}

const EFFECT_FREE = new Set(EFFECT_FREE_FUNCTIONS);
const OPERATORS = new Set(PLAIN_OPERATORS);

/**
 * The functions that write a value as JSON: of a type with a cast to `json` (or `jsonb`) of the
 * app's, they call that cast's function.
 */
const JSON_WRITERS = new Set([
  'to_json',
  'to_jsonb',
  'json_agg',
  'jsonb_agg',
  'json_build_object',
  'jsonb_build_object',
  'json_build_array',
  'jsonb_build_array',
  'json_object_agg',
  'jsonb_object_agg',
  'row_to_json',
  'array_to_json',
]);

/** A call of one of PostgreSQL's effect-free functions, which the app does not shadow. */
function callsEffectFree(call: SqlNode): boolean {
  const name = callsBuiltIn(call, EFFECT_FREE);
  if (name === undefined || isShadowedFunction(name)) return false;
  return !(JSON_WRITERS.has(name) && (isAppType('json') || isAppType('jsonb')));
}

/** A call of `call` is one of PostgreSQL's own `names` (unqualified, or in `pg_catalog`). */
function callsBuiltIn(call: SqlNode, names: ReadonlySet<string>): string | undefined {
  const { name, schema } = functionName(call);
  if (schema !== undefined && schema !== 'pg_catalog') return undefined;
  return names.has(name) ? name : undefined;
}

/**
 * The nodes a plain read may hold: PostgreSQL 15's grammar of a `SELECT` without effects. Any
 * other (a JSON function of PostgreSQL 16 and later, which PostgreSQL 15 would take for a call
 * of the app's function of that name, anything unknown) makes the text not provably plain.
 * `INTO` and row locks are nodes of their own, not among these. A `WITH` (its `WithClause`
 * and each `CommonTableExpr`, `RECURSIVE` and `MATERIALIZED` included) holds only names and
 * its queries: a query that writes (`WITH x AS (INSERT …) SELECT …`) is an `InsertStmt`,
 * `UpdateStmt`, `DeleteStmt` or `MergeStmt`, none among these. Its `SEARCH` and `CYCLE`
 * clauses name columns only, and compare them as an `ORDER BY` or a `DISTINCT` does.
 */
// prettier-ignore
const PLAIN_NODES = new Set([
  'SelectStmt', 'ResTarget', 'ColumnRef', 'A_Star', 'A_Const', 'ParamRef', 'TypeCast',
  'TypeName', 'String', 'Integer', 'Float', 'Boolean', 'BitString', 'A_Expr', 'BoolExpr',
  'NullTest', 'BooleanTest', 'SubLink', 'RangeVar', 'JoinExpr', 'Alias', 'SortBy', 'WindowDef',
  'FuncCall', 'CoalesceExpr', 'MinMaxExpr', 'CaseExpr', 'CaseWhen', 'SQLValueFunction',
  'RangeSubselect', 'RangeFunction', 'A_Indirection', 'A_Indices', 'A_ArrayExpr', 'RowExpr',
  'CollateClause', 'List', 'NamedArgExpr', 'GroupingSet', 'WithClause', 'CommonTableExpr',
]);

/**
 * The words a read's text may begin with: `SELECT`, a `WITH` before one, and the two short
 * forms PostgreSQL reads as a `SELECT` (`TABLE t`, `VALUES (…), (…)`). Any other first word
 * begins a statement that is not one.
 */
const READ_FIRST_WORDS = new Set(['select', 'with', 'table', 'values']);

/** A cast (`::money2`, `CAST(… AS checked_int)`) to a type whose cast or check may be the app's. */
function castsToAppType(cast: SqlNode): boolean {
  const { name, schema } = qualifiedName((cast.typeName as SqlNode | undefined)?.names);
  return schema !== 'pg_catalog' && isAppType(name);
}

/**
 * Whether a column reference may be a call of the app's function written as a column: its
 * last name (`t.receipt`, `(t).receipt`) is a function of a row of the app's.
 */
function mayCallAsColumn(names: unknown): boolean {
  const parts = (names as unknown[] | undefined) ?? [];
  return parts.length > 0 && isColumnFunction(qualifiedName([parts[parts.length - 1]]).name);
}

/**
 * An operator's name (`{ String }` parts, perhaps `OPERATOR(pg_catalog.=)`), if plain: of an
 * expression (`A_Expr`), a comparison with a subquery (`x op ANY (SELECT …)`, a `SubLink`'s),
 * an `ORDER BY … USING op`.
 */
function isPlainOperator(names: unknown): boolean {
  const { name, schema } = qualifiedName(names);
  if (schema !== undefined && schema !== 'pg_catalog') return false;
  // BETWEEN compares with >= and <=; its node names the construct.
  const used = /^(NOT )?BETWEEN/i.test(name) ? ['>=', '<='] : [name];
  return used.every((operator) => OPERATORS.has(operator) && !isShadowedOperator(operator));
}

/**
 * Whether `sql` is provably one plain `SELECT`: one statement (a `SELECT`, perhaps after a
 * `WITH` of reads, or written `TABLE t` or `VALUES …`), with no row lock, no `INTO`, no write
 * anywhere in it (a `WITH` that writes shows its `INSERT`, `UPDATE` or `DELETE`), and no call
 * of a function not known to be free of effects. Only such a read may run before, and apart
 * from, the request's transaction, or beside a nested transaction as a read; anything else
 * opens it, which is always correct, only less lazy.
 *
 * A function call is the one thing a read's text shows that may write (`SELECT
 * forget_order($1)`; a VOLATILE function may do anything), so only PostgreSQL's own functions
 * known to have no effect are let through (`EFFECT_FREE_FUNCTIONS`), and none the app
 * defines again under the same name (`isShadowedFunction`): a call's name alone cannot tell
 * them apart from the app's.
 */
export function isPlainRead(sql: unknown): boolean {
  if (typeof sql !== 'string') return false;
  // The hot path: every statement a handler sends before its first write comes here. One that
  // begins with any other word is not one, whatever follows (a `WITH` is parsed: it may hold a
  // write, which its tree shows).
  const first = /^\s*([a-z_]+)/i.exec(sql);
  if (first && !READ_FIRST_WORDS.has(first[1].toLowerCase())) return false;
  if (isCatalogUnread()) return false;
  const statements = parsedStatements(sql);
  if (statements?.length !== 1) return false;
  const [type] = nodeOf(statements[0].node) ?? [];
  if (type !== 'SelectStmt') return false;
  let plain = true;
  walk(statements[0].node, (kind, body) => {
    if (!PLAIN_NODES.has(kind)) plain = false;
    else if (kind === 'SelectStmt' && (body.intoClause || body.lockingClause)) plain = false;
    else if (kind === 'FuncCall' && !callsEffectFree(body)) plain = false;
    else if (kind === 'A_Expr' && !isPlainOperator(body.name)) plain = false;
    else if (kind === 'SubLink' && body.operName && !isPlainOperator(body.operName)) plain = false;
    else if (kind === 'SortBy' && body.useOp && !isPlainOperator(body.useOp)) plain = false;
    else if (kind === 'ColumnRef' && mayCallAsColumn(body.fields)) plain = false;
    else if (kind === 'A_Indirection' && mayCallAsColumn(body.indirection)) plain = false;
    else if (kind === 'RangeVar' && isAppRelation(body.relname as string)) plain = false;
    else if (kind === 'TypeCast' && castsToAppType(body)) plain = false;
  });
  return plain;
}

/** The kinds of `TransactionStmt` that start or end a transaction block. */
const STARTS_OR_ENDS = new Set([
  'TRANS_STMT_BEGIN',
  'TRANS_STMT_START',
  'TRANS_STMT_COMMIT',
  'TRANS_STMT_ROLLBACK',
  'TRANS_STMT_PREPARE',
  'TRANS_STMT_COMMIT_PREPARED',
  'TRANS_STMT_ROLLBACK_PREPARED',
]);

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
  // Every such statement begins with one of these words; a text without any has none (a
  // keyword is never escaped or quoted). A long text of many INSERTs is then not parsed here.
  if (!/\b(begin|start|commit|end|rollback|abort|prepare)\b/i.test(sql)) return undefined;
  for (const statement of statementsOf(sql)) {
    const [type, body] = nodeOf(statement.node) ?? [];
    if (type !== 'TransactionStmt' || !STARTS_OR_ENDS.has(body!.kind as string)) continue;
    const word = /^[a-z]+/i.exec(statement.text)?.[0].toUpperCase() ?? 'COMMIT';
    return word === 'START' || word === 'PREPARE' ? `${word} TRANSACTION` : word;
  }
  return undefined;
}

/**
 * Whether `sql` has a `ROLLBACK TO SAVEPOINT` (an app's own savepoint, as `pg` users write
 * them): once the text succeeds whole, the transaction is no longer aborted by a failure
 * before it, which happened inside that savepoint (none can be made after a failure).
 */
export function rollsBackToSavepoint(sql: unknown): boolean {
  if (typeof sql !== 'string' || !/\brollback\b/i.test(sql)) return false;
  return statementsOf(sql).some((statement) => {
    const [type, body] = nodeOf(statement.node) ?? [];
    return type === 'TransactionStmt' && body!.kind === 'TRANS_STMT_ROLLBACK_TO';
  });
}

/** A savepoint statement of the app's own, by the savepoint's name. */
export interface SavepointControl {
  kind: 'savepoint' | 'release' | 'rollback-to';
  name: string;
}

const SAVEPOINT_KINDS: Record<string, SavepointControl['kind']> = {
  TRANS_STMT_SAVEPOINT: 'savepoint',
  TRANS_STMT_RELEASE: 'release',
  TRANS_STMT_ROLLBACK_TO: 'rollback-to',
};

/**
 * The statements of `sql` in their order, each a savepoint statement of the app's own
 * (Drizzle's nested `tx.transaction()`, Kysely's `savepoint()`, Prisma's nested
 * `$transaction`, or `pg` users' own: `SAVEPOINT x`, `RELEASE [SAVEPOINT] x`,
 * `ROLLBACK TO [SAVEPOINT] x`) by its savepoint's name, or null for any other statement.
 * A comment may come first, and a text may hold several statements (`SAVEPOINT a; INSERT …`):
 * each is read. Undefined when the text holds no savepoint statement at all.
 */
export function savepointControlsOf(sql: unknown): (SavepointControl | null)[] | undefined {
  // Every such statement holds one of these words (a keyword is never escaped or quoted).
  if (typeof sql !== 'string' || !/\b(savepoint|release|rollback)\b/i.test(sql)) return undefined;
  const controls = statementsOf(sql).map((statement): SavepointControl | null => {
    const [type, body] = nodeOf(statement.node) ?? [];
    const kind = type === 'TransactionStmt' ? SAVEPOINT_KINDS[body!.kind as string] : undefined;
    const name = body?.savepoint_name;
    return kind && typeof name === 'string' ? { kind, name } : null;
  });
  return controls.some((control) => control !== null) ? controls : undefined;
}

/** What a nested transaction's own control statement asks of the request's transaction. */
export type NestedControl =
  | { kind: 'begin'; level?: string; readOnly?: true }
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
  // A comment may come first (a tracing tool's, sqlcommenter's).
  if (
    typeof sql !== 'string' ||
    !/^\s*((begin|start|commit|end|rollback|abort|set)\b|\/\*|--)/i.test(sql)
  ) {
    return undefined;
  }
  const statements = parsedStatements(sql);
  if (statements?.length !== 1) return undefined;
  const [type, body] = nodeOf(statements[0].node) ?? [];
  if (type === 'VariableSetStmt') {
    const level = levelSetBy(body!);
    return level ? { kind: 'set-isolation', level } : undefined;
  }
  if (type !== 'TransactionStmt') return undefined;
  switch (body!.kind) {
    case 'TRANS_STMT_BEGIN':
    case 'TRANS_STMT_START': {
      const level = isolationOf(body!.options);
      const readOnly = booleanOf(modeOf(body!.options, 'transaction_read_only') as Literal);
      return {
        kind: 'begin',
        ...(level ? { level } : {}),
        ...(readOnly ? { readOnly: true as const } : {}),
      };
    }
    case 'TRANS_STMT_COMMIT':
      return body!.chain ? undefined : { kind: 'commit' };
    case 'TRANS_STMT_ROLLBACK':
      return body!.chain ? undefined : { kind: 'rollback' };
    default:
      return undefined;
  }
}

/** A transaction mode among `modes` (`DefElem`s), by its name: its constant, if it has one. */
function modeOf(modes: unknown, name: string): unknown {
  for (const mode of (modes as unknown[] | undefined) ?? []) {
    const [type, body] = nodeOf(mode) ?? [];
    if (type === 'DefElem' && body!.defname === name) return literalOf(body!.arg) ?? null;
  }
  return undefined;
}

/** The levels `transaction_isolation` takes, in capitals (PostgreSQL reads them in any case). */
const ISOLATION_LEVELS = new Set([
  'READ UNCOMMITTED',
  'READ COMMITTED',
  'REPEATABLE READ',
  'SERIALIZABLE',
]);

/**
 * The level a `SET` asks of the transaction it runs in, in capitals: `SET TRANSACTION
 * ISOLATION LEVEL …`, or the same said as the setting, `SET [LOCAL | SESSION]
 * transaction_isolation = '…'`, which PostgreSQL takes alike (a transaction's first statement,
 * refused in a subtransaction with 25001). Undefined for any other `SET` (a `DEFAULT`, an
 * unknown level: left to PostgreSQL, whose error is the answer).
 */
function levelSetBy(body: SqlNode): string | undefined {
  if (body.kind === 'VAR_SET_MULTI' && body.name === 'TRANSACTION') return isolationOf(body.args);
  if (body.kind !== 'VAR_SET_VALUE' || body.name !== 'transaction_isolation') return undefined;
  const args = body.args as unknown[] | undefined;
  const value = args?.length === 1 ? literalOf(args[0]) : undefined;
  const level = typeof value === 'string' ? value.toUpperCase() : undefined;
  return level && ISOLATION_LEVELS.has(level) ? level : undefined;
}

/** The isolation level among a transaction's modes, in capitals; undefined when none. */
function isolationOf(modes: unknown): string | undefined {
  const level = modeOf(modes, 'transaction_isolation');
  return typeof level === 'string' ? level.toUpperCase() : undefined;
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
 * lower-cased; undefined when it calls none. A call made from inside a function body (a `DO`
 * block, a function of the app's) cannot be seen here.
 */
export function sessionAdvisoryLockOf(sql: unknown): string | undefined {
  // The hot path: almost no statement mentions an advisory lock at all (a U&"…" name may
  // spell it with escapes).
  if (typeof sql !== 'string' || !/advisory|u&/i.test(sql)) return undefined;
  for (const statement of statementsOf(sql)) {
    const [first] = callsIn(statement.node, SESSION_ADVISORY);
    if (first) return first.name;
  }
  return undefined;
}

/**
 * Settings whose session-level value outlives the request on its pooled connection: the role,
 * session authorization and search path (every later request runs with them), and the
 * defaults a transaction begun without a level takes (the library's own statements and later
 * requests would run so).
 */
const SESSION_SETTINGS = new Set([
  'role',
  'session_authorization',
  'search_path',
  'default_transaction_isolation',
  'default_transaction_read_only',
]);

/** How strings are read in SQL text, which the library reads: refused, local or not. */
const STRING_SYNTAX = 'standard_conforming_strings';

const SET_CONFIG = new Set(['set_config']);

/**
 * The first statement of `sql` that changes, for the session rather than for the transaction,
 * what the library relies on: the role, the session authorization or the search path (`SET
 * ROLE`, `SET SESSION AUTHORIZATION`, `SET search_path` or `SET SCHEMA`, not `SET LOCAL`, and
 * `set_config('role' | 'search_path', …, false)`); the defaults of a transaction (`SET
 * default_transaction_isolation`, `SET default_transaction_read_only`, `SET SESSION
 * CHARACTERISTICS AS TRANSACTION …` and their `set_config`), also as `UPDATE pg_settings`; how
 * strings are read (`standard_conforming_strings`, even for the transaction); the named
 * statements the library has prepared on the connection (`DEALLOCATE ALL`, or one of its own
 * names). As its leading words (`SET ROLE`) or the call (`set_config('role', …, false)`);
 * undefined when there is none. Committed with the request's transaction, such a change stays
 * with the pooled connection after the request (a `DEALLOCATE` is not even transactional).
 * `RESET` and `SET … TO DEFAULT` are not counted (they put the session's default back); a
 * `set_config` of one of these settings whose `is_local` is not a constant true is (it cannot
 * be read, so it may be false); one whose name is a parameter cannot be read, and is not.
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
  for (const statement of statementsOf(sql)) {
    const found =
      setStatementOf(statement.node) ??
      deallocateOf(statement.node) ??
      settingsUpdateOf(statement.node) ??
      sessionSetConfigOf(statement.node);
    if (found) return found;
  }
  return undefined;
}

/** `SET [SESSION] ROLE | SESSION AUTHORIZATION | search_path | SCHEMA | defaults` (not LOCAL). */
function setStatementOf(node: SqlNode): string | undefined {
  const [type, body] = nodeOf(node) ?? [];
  if (type !== 'VariableSetStmt') return undefined;
  const { kind, name, is_local: local } = body as { kind: string; name: string; is_local?: true };
  if (kind === 'VAR_RESET' || kind === 'VAR_RESET_ALL' || kind === 'VAR_SET_DEFAULT') {
    return undefined;
  }
  if (name === STRING_SYNTAX) return `SET ${STRING_SYNTAX}`;
  if (local) return undefined;
  if (name === 'SESSION CHARACTERISTICS') return 'SET SESSION CHARACTERISTICS';
  if (name === 'role') return 'SET ROLE';
  if (name === 'session_authorization') return 'SET SESSION AUTHORIZATION';
  if (name === 'search_path') return 'SET search_path';
  if (SESSION_SETTINGS.has(name)) return `SET ${name}`;
  return undefined;
}

/** The prefix of the library's own statements' names (postgres-statements.ts). */
const OWN_STATEMENT_PREFIX = 'idempotency_';

/** `DEALLOCATE [PREPARE] ALL`, or of a statement the library named. */
function deallocateOf(node: SqlNode): string | undefined {
  const [type, body] = nodeOf(node) ?? [];
  if (type !== 'DeallocateStmt') return undefined;
  if (body!.isall) return 'DEALLOCATE ALL';
  const name = body!.name as string | undefined;
  return name?.startsWith(OWN_STATEMENT_PREFIX) ? `DEALLOCATE ${name}` : undefined;
}

/**
 * `UPDATE pg_settings … WHERE name = 'role'` (or another of the refused settings): PostgreSQL
 * reads it as the `SET` of that setting, for the session.
 */
function settingsUpdateOf(node: SqlNode): string | undefined {
  const [type, body] = nodeOf(node) ?? [];
  if (type !== 'UpdateStmt') return undefined;
  const relation = body!.relation as { relname?: string; schemaname?: string } | undefined;
  if (relation?.relname !== 'pg_settings') return undefined;
  if (relation.schemaname !== undefined && relation.schemaname !== 'pg_catalog') return undefined;
  let named: string | undefined;
  walk(body!.whereClause, (kind, constant) => {
    const value = kind === 'A_Const' ? literalOf({ A_Const: constant }) : undefined;
    const setting = typeof value === 'string' ? value.toLowerCase() : undefined;
    if (!named && setting && (SESSION_SETTINGS.has(setting) || setting === STRING_SYNTAX)) {
      named = setting;
    }
  });
  return named ? `UPDATE pg_settings (${named})` : undefined;
}

/** A call `set_config('role' | 'search_path' | …, …, false)`, as it reads in the message. */
function sessionSetConfigOf(node: SqlNode): string | undefined {
  for (const { call } of callsIn(node, SET_CONFIG)) {
    const args = (call.args as unknown[] | undefined) ?? [];
    if (args.length !== 3) continue;
    const name = literalOf(args[0]);
    if (typeof name !== 'string') continue;
    const setting = name.toLowerCase();
    if (setting === STRING_SYNTAX) return `set_config('${setting}', …)`;
    if (!SESSION_SETTINGS.has(setting)) continue;
    const local = booleanOf(literalOf(args[2]));
    if (local === false) return `set_config('${setting}', …, false)`;
    if (local === undefined) return `set_config('${setting}', …)`;
  }
  return undefined;
}

/** The calls of PostgreSQL's own `names` in one statement's tree, in the text's order. */
function callsIn(node: SqlNode, names: ReadonlySet<string>): { name: string; call: SqlNode }[] {
  const calls: { name: string; call: SqlNode; at: number }[] = [];
  walk(node, (type, body) => {
    if (type !== 'FuncCall') return;
    const name = callsBuiltIn(body, names);
    if (name) calls.push({ name, call: body, at: (body.location as number) ?? 0 });
  });
  return calls.sort((a, b) => a.at - b.at);
}

/**
 * Whether `sql` is one statement that only sets the current transaction's read-only mode (or
 * its other modes), without naming a level: `SET TRANSACTION READ ONLY` (its other modes too),
 * `SET [LOCAL] transaction_read_only`, or a `SELECT` of nothing but
 * `set_config('transaction_read_only', …)` (whatever its third argument: the setting is the
 * transaction's). Sent through the pool (or a DataSource's `query()`) outside any transaction,
 * it does nothing; sent into the request's, it would make the transaction that stores the
 * answer read only.
 */
export function isTransactionModeOnly(sql: unknown): boolean {
  if (typeof sql !== 'string' || !/transaction|u&/i.test(sql)) return false;
  const statements = parsedStatements(sql);
  if (statements?.length !== 1) return false;
  const [type, body] = nodeOf(statements[0].node) ?? [];
  if (type === 'VariableSetStmt') {
    if (body!.name === 'transaction_read_only') return true;
    return (
      body!.kind === 'VAR_SET_MULTI' &&
      body!.name === 'TRANSACTION' &&
      modeOf(body!.args, 'transaction_isolation') === undefined
    );
  }
  if (type !== 'SelectStmt') return false;
  const { targetList, ...rest } = body as { targetList?: unknown[] } & SqlNode;
  const clauses = Object.keys(rest).filter((key) => !['limitOption', 'op'].includes(key));
  if (clauses.length > 0 || !targetList?.length) return false;
  return targetList.every((target) => {
    const call = nodeOf(nodeOf(target)?.[1].val);
    if (call?.[0] !== 'FuncCall' || !callsBuiltIn(call[1], SET_CONFIG)) return false;
    const name = literalOf((call[1].args as unknown[] | undefined)?.[0]);
    return typeof name === 'string' && name.toLowerCase() === 'transaction_read_only';
  });
}

/**
 * Whether any statement of `sql` may make the current transaction read only: `SET TRANSACTION
 * READ ONLY` (with any other modes), `SET [LOCAL | SESSION] transaction_read_only` to anything
 * but a constant false, or `set_config('transaction_read_only', …)` with any value but a
 * constant false. In the request's transaction, the library could not store the answer after
 * it.
 */
export function setsReadOnly(sql: unknown): boolean {
  if (typeof sql !== 'string' || !/transaction|u&/i.test(sql)) return false;
  return statementsOf(sql).some((statement) => {
    const [type, body] = nodeOf(statement.node) ?? [];
    if (type === 'VariableSetStmt') {
      if (body!.kind === 'VAR_SET_MULTI' && body!.name === 'TRANSACTION') {
        const mode = modeOf(body!.args, 'transaction_read_only');
        return mode !== undefined && booleanOf(mode as Literal | undefined) !== false;
      }
      if (body!.name !== 'transaction_read_only' || body!.kind !== 'VAR_SET_VALUE') return false;
      return booleanOf(literalOf((body!.args as unknown[] | undefined)?.[0])) !== false;
    }
    return callsIn(statement.node, SET_CONFIG).some(({ call }) => {
      const [name, value] = (call.args as unknown[] | undefined) ?? [];
      const setting = literalOf(name);
      if (typeof setting !== 'string' || setting.toLowerCase() !== 'transaction_read_only') {
        return false;
      }
      return booleanOf(literalOf(value)) !== false;
    });
  });
}

/** The settings that say who a statement runs as, and what its names find. */
const IDENTITY_SETTINGS = new Set(['role', 'search_path', 'session_authorization']);

/**
 * Whether `sql` sets, for its transaction, the role, the session authorization or the search
 * path: `SET LOCAL ROLE | SESSION AUTHORIZATION | search_path | SCHEMA`, or a `set_config` of
 * one of them, or of a setting whose name is not a constant (the RLS recipe's first
 * statements).
 */
export function setsIdentity(sql: unknown): boolean {
  // An escaped name (E'r\\x6fle', U&'r\\006Fle') does not show its letters.
  if (
    typeof sql !== 'string' ||
    !/role|search_path|schema|authorization|set_config|\\|u&/i.test(sql)
  ) {
    return false;
  }
  return statementsOf(sql).some((statement) => identityIn(statement.node));
}

/** Whether one statement sets the role, session authorization or search path (`setsIdentity`). */
function identityIn(node: SqlNode): boolean {
  const [type, body] = nodeOf(node) ?? [];
  if (type === 'VariableSetStmt') {
    return body!.kind === 'VAR_SET_VALUE' && IDENTITY_SETTINGS.has(body!.name as string);
  }
  return callsIn(node, SET_CONFIG).some(({ call }) => {
    const name = literalOf((call.args as unknown[] | undefined)?.[0]);
    return typeof name !== 'string' || IDENTITY_SETTINGS.has(name.toLowerCase());
  });
}

/**
 * Settings a transaction's own and ended with it whatever a savepoint does: its modes (ended
 * at the savepoint's RELEASE too, by PostgreSQL), and those the library keeps and puts back
 * itself (`keepNestedState`).
 */
const NOT_KEPT_LOCALLY = new Set([
  'transaction_isolation',
  'transaction_read_only',
  'transaction_deferrable',
  'TRANSACTION',
  ...IDENTITY_SETTINGS,
  // Not to be put back by a statement: PostgreSQL refuses to change `temp_buffers` once the
  // session has used a temporary table (22023), which its COMMIT's own put-back is not held
  // to (it lasts to the request's COMMIT: a size, no effect on what is written); `seed`
  // reads `unavailable`, and what it set (the random generator's state) no COMMIT puts back.
  'temp_buffers',
  'seed',
]);

/**
 * The settings the statements of `sql` set for the current transaction (`SET LOCAL name`,
 * `SET LOCAL name TO DEFAULT`, `set_config('name', …, true)`), lower-cased, in the text's
 * order; a nested transaction's `RELEASE SAVEPOINT` keeps them, where its `COMMIT` without the
 * library would have ended them. Not its modes nor the role, the session authorization or the
 * search path (see `NOT_KEPT_LOCALLY`). A `set_config`'s name and `is_local` are read from
 * its `values` where they are parameters (`set_config('app.tenant', $1, $2)`, as Prisma's
 * and Drizzle's templates send them); one whose name or `is_local` is neither a constant nor
 * a parameter is not counted (it cannot be read).
 */
export function localSettingsOf(sql: unknown, values?: readonly unknown[]): string[] {
  if (typeof sql !== 'string' || !/local|set_config|u&/i.test(sql)) return [];
  return settingsSet(sql, values, true);
}

/**
 * Whether the last statement of `sql` sets anything for its transaction only: `SET LOCAL` (any
 * setting, the role, the search path and the session authorization among them, or `TO
 * DEFAULT`), or a `set_config(…, …, true)`, its `is_local` read from `values` where it is a
 * parameter. Outside a transaction block PostgreSQL runs such a statement and forgets it at
 * once. Only the last: the statements of one text sent alone run as one implicit transaction,
 * so a setting with statements after it in its text is read by them, as its code means
 * (`SET LOCAL app.actor = 'a'; INSERT … current_setting('app.actor')`: adversary 101).
 */
export function setsForTransaction(sql: unknown, values?: readonly unknown[]): boolean {
  if (typeof sql !== 'string' || !/local|set_config|u&/i.test(sql)) return false;
  return statementsOf(sql)
    .slice(-1)
    .some(({ node }) => {
      const [type, body] = nodeOf(node) ?? [];
      if (type === 'VariableSetStmt') return (body as { is_local?: boolean }).is_local === true;
      return callsIn(node, SET_CONFIG).some(({ call }) => {
        const isLocal = ((call.args as unknown[] | undefined) ?? [])[2];
        return booleanOf(boundOf(isLocal, values)) === true;
      });
    });
}

/**
 * The settings the statements of `sql` set for the session (`SET name` without `LOCAL`, `SET
 * name TO DEFAULT`, `RESET name`, `set_config('name', …, false)`), read as `localSettingsOf`
 * reads them, with the same left out (the role, search path and modes: refused for the
 * session, or kept and put back apart); not `RESET ALL` (it names none). Inside a nested
 * transaction begun beside another, which without the library runs on a connection of its
 * own, such a setting would otherwise last into the other's transaction on the request's one
 * connection.
 */
export function sessionSettingsOf(sql: unknown, values?: readonly unknown[]): string[] {
  if (typeof sql !== 'string' || !/set|u&/i.test(sql)) return [];
  return settingsSet(sql, values, false);
}

/** The settings `sql` sets for the transaction (`local`) or for the session (see above). */
function settingsSet(sql: string, values: readonly unknown[] | undefined, local: boolean) {
  const names: string[] = [];
  for (const statement of statementsOf(sql)) {
    for (const name of settingsIn(statement.node, values, local)) {
      if (!names.includes(name)) names.push(name);
    }
  }
  return names;
}

/** The settings one statement sets for the current transaction (see `localSettingsOf`). */
function localSettingsIn(node: SqlNode, values?: readonly unknown[]): string[] {
  return settingsIn(node, values, true);
}

/** The settings one statement sets for the transaction (`local`) or for the session. */
function settingsIn(node: SqlNode, values: readonly unknown[] | undefined, local: boolean) {
  const names: string[] = [];
  const add = (name: string) => {
    const lower = name.toLowerCase();
    if (!NOT_KEPT_LOCALLY.has(lower) && !NOT_KEPT_LOCALLY.has(name)) names.push(lower);
  };
  const kinds = local
    ? ['VAR_SET_VALUE', 'VAR_SET_DEFAULT']
    : ['VAR_SET_VALUE', 'VAR_SET_DEFAULT', 'VAR_RESET'];
  const [type, body] = nodeOf(node) ?? [];
  if (type === 'VariableSetStmt') {
    const {
      kind,
      name,
      is_local: isLocal,
    } = body as { kind: string; name?: string; is_local?: true };
    if (name !== undefined && (isLocal === true) === local && kinds.includes(kind)) add(name);
    return names;
  }
  for (const { call } of callsIn(node, SET_CONFIG)) {
    const [name, , isLocal] = (call.args as unknown[] | undefined) ?? [];
    const setting = boundOf(name, values);
    if (typeof setting === 'string' && booleanOf(boundOf(isLocal, values)) === local) {
      add(setting);
    }
  }
  return names;
}

/**
 * What one statement of a text does to the nested transaction it runs in, as the pool seam
 * notes it on the savepoint innermost when that statement runs (see `statementStepsOf`).
 */
export interface StatementStep {
  /** A savepoint statement of the app's own (see `savepointControlsOf`), or null. */
  control: SavepointControl | null;
  /** It sets the role, session authorization or search path for the transaction. */
  identity: boolean;
  /** It sets a setting for the transaction (`SET LOCAL`, `set_config(…, true)`). */
  settings: boolean;
}

/**
 * The statements of `sql` in their order, each as what it does to the nested transaction it
 * runs in: a savepoint statement of the app's own, or what it sets there (`setsIdentity`,
 * `localSettingsOf`). A setting is the savepoint's innermost when it runs, which a savepoint
 * statement earlier in the same text changes (`SAVEPOINT s; SELECT set_config(…, true)`
 * sets it inside `s`, ended by a `ROLLBACK TO s`; `ROLLBACK TO s; RELEASE s; SET LOCAL …` sets
 * it in the one around `s`): read as a whole, the text would pin it on the one before the
 * text. A text without a savepoint statement is one step: its settings all land in one place.
 * Never empty (an empty text is one step that sets nothing).
 */
export function statementStepsOf(sql: unknown, values?: readonly unknown[]): StatementStep[] {
  const controls = savepointControlsOf(sql);
  if (!controls) {
    return [
      {
        control: null,
        identity: setsIdentity(sql),
        settings: localSettingsOf(sql, values).length > 0,
      },
    ];
  }
  return statementsOf(sql as string).map((statement, at) => ({
    control: controls[at],
    identity: identityIn(statement.node),
    settings: localSettingsIn(statement.node, values).length > 0,
  }));
}

/** What a transaction's COMMIT ends that a savepoint's RELEASE keeps (see `commitEndsOf`). */
export interface CommitEnds {
  /**
   * Temporary tables made `ON COMMIT DROP` or `ON COMMIT DELETE ROWS`, by name; `keep`: one
   * made again without either (`PRESERVE ROWS`), which a COMMIT leaves alone.
   */
  tempTables: { name: string; action: 'drop' | 'delete' | 'keep' }[];
  /** Cursors declared without `WITH HOLD`, by name. */
  cursors: string[];
  /** Tables renamed (`ALTER TABLE a RENAME TO b`): a temporary one's action goes with it. */
  renames?: { from: string; to: string }[];
}

/** `DECLARE … CURSOR WITH HOLD` (PostgreSQL's CURSOR_OPT_HOLD). */
const CURSOR_OPT_HOLD = 0x20;

/**
 * What the statements of `sql` make that a transaction's COMMIT ends and a savepoint's RELEASE
 * keeps: a temporary table `ON COMMIT DROP | DELETE ROWS` (`CREATE TEMP TABLE`, `CREATE TEMP
 * TABLE … AS`, `SELECT … INTO TEMP`), a cursor declared without `WITH HOLD`; and the tables
 * that end no longer so (`keep`: dropped, or made again without an action). In a data layer's nested transaction,
 * its own COMMIT would have ended them without the library.
 */
export function commitEndsOf(sql: unknown): CommitEnds {
  const ends: CommitEnds = { tempTables: [], cursors: [] };
  if (typeof sql !== 'string' || !/temp|declare|drop|into|rename|u&/i.test(sql)) return ends;
  // (`pg_temp` holds `temp`.)
  for (const statement of statementsOf(sql)) {
    const [type, body] = nodeOf(statement.node) ?? [];
    const created =
      type === 'CreateStmt'
        ? { relation: body!.relation, onCommit: body!.oncommit }
        : type === 'CreateTableAsStmt' || (type === 'SelectStmt' && body!.intoClause)
          ? {
              relation: ((body!.into ?? body!.intoClause) as SqlNode | undefined)?.rel,
              onCommit: ((body!.into ?? body!.intoClause) as SqlNode | undefined)?.onCommit,
            }
          : undefined;
    if (type === 'RenameStmt' && body!.renameType === 'OBJECT_TABLE') {
      const relation = body!.relation as { relname?: string; schemaname?: string } | undefined;
      if (relation?.relname && (!relation.schemaname || relation.schemaname === 'pg_temp')) {
        (ends.renames ??= []).push({ from: relation.relname, to: body!.newname as string });
      }
      continue;
    }
    if (type === 'DropStmt' && body!.removeType === 'OBJECT_TABLE') {
      // Dropped: a table made again after it starts with no action noted (`keep`).
      for (const object of (body!.objects as SqlNode[] | undefined) ?? []) {
        const parts = ((object.List as SqlNode | undefined)?.items as SqlNode[] | undefined) ?? [];
        const names = parts.map((part) => (part.String as { sval?: string } | undefined)?.sval);
        const name = names.at(-1);
        if (name && (names.length === 1 || names[0] === 'pg_temp')) {
          ends.tempTables.push({ name, action: 'keep' });
        }
      }
      continue;
    }
    if (created) {
      const relation = created.relation as { relname?: string; relpersistence?: string };
      // `IF NOT EXISTS` over a table of that name makes nothing: its action stands.
      const action =
        created.onCommit === 'ONCOMMIT_DROP'
          ? 'drop'
          : created.onCommit === 'ONCOMMIT_DELETE_ROWS'
            ? 'delete'
            : body!.if_not_exists
              ? undefined
              : 'keep';
      // `CREATE TABLE pg_temp.t` is temporary too, without the word.
      const temporary =
        relation?.relpersistence === 't' ||
        (relation as { schemaname?: string } | undefined)?.schemaname === 'pg_temp';
      if (action && temporary && relation.relname) {
        ends.tempTables.push({ name: relation.relname, action });
      }
    } else if (type === 'DeclareCursorStmt') {
      const options = (body!.options as number | undefined) ?? 0;
      if ((options & CURSOR_OPT_HOLD) === 0) ends.cursors.push(body!.portalname as string);
    }
  }
  return ends;
}
