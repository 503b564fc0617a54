/**
 * PostgreSQL's own functions and operators a plain read may call (see `isPlainRead`), and what
 * of the app's a read may reach without its text naming it: those names defined again outside
 * `pg_catalog`, views, and types whose casts or checks may run the app's code. A name is resolved by its arguments too: with the app's `lower(integer)`,
 * `SELECT lower(5)` calls the app's, not PostgreSQL's `lower(text)`; an operator is a function
 * by another name. Read once with the start-up's first statement (`IdempotencyDatabase`):
 * only a VOLATILE definition may write (PostgreSQL refuses a write in a STABLE or IMMUTABLE
 * SQL or PL/pgSQL function), so an extension's immutable `=` (citext, PostGIS) shadows
 * nothing. What the app defines while it runs is met at its restart.
 */

/**
 * PostgreSQL's functions that have no effect beyond their result and take no lock (what
 * TypeORM's reads and counts use, what the SQL syntax of `EXTRACT`, `TRIM`, `SUBSTRING`,
 * `POSITION`, `LIKE … ESCAPE` and `SIMILAR TO` calls, full-text search, series and ordered-set
 * aggregates), by their name in `pg_catalog`. Nothing else: a call of any other function may
 * write (see `isPlainRead`). A text search configuration's parser and dictionaries are C code
 * only a superuser installs, as an extension's is.
 */
// prettier-ignore
export const EFFECT_FREE_FUNCTIONS: readonly string[] = [
  'count', 'sum', 'avg', 'min', 'max', 'lower', 'upper', 'length', 'char_length',
  'octet_length', 'concat', 'concat_ws', 'replace', 'abs', 'round', 'floor', 'ceil', 'ceiling',
  'mod', 'power', 'sqrt', 'array_agg', 'string_agg', 'json_agg', 'jsonb_agg',
  'json_build_object', 'jsonb_build_object', 'json_build_array', 'jsonb_build_array',
  'json_object_agg', 'jsonb_object_agg', 'to_json', 'to_jsonb', 'row_to_json', 'bool_and',
  'bool_or', 'every', 'row_number', 'rank', 'dense_rank', 'lag', 'lead', 'date_trunc',
  'date_part', 'to_char', 'to_date', 'to_timestamp', 'now', 'array_length', 'cardinality',
  'unnest', 'left', 'right', 'split_part', 'starts_with', 'md5', 'encode', 'decode', 'format',
  'jsonb_array_length', 'jsonb_typeof', 'age', 'extract', 'substring', 'position', 'btrim',
  'ltrim', 'rtrim', 'overlay', 'timezone', 'like_escape', 'similar_to_escape',
  'similar_escape', 'to_tsvector', 'to_tsquery', 'plainto_tsquery', 'phraseto_tsquery',
  'websearch_to_tsquery', 'ts_rank', 'ts_rank_cd', 'generate_series', 'percentile_cont',
  'percentile_disc', 'mode',
];

/**
 * The operators of comparisons, arithmetic, text, JSON, arrays and full-text search (`@@`) a
 * plain read may use.
 */
// prettier-ignore
export const PLAIN_OPERATORS: readonly string[] = [
  '=', '<>', '!=', '<', '>', '<=', '>=', '+', '-', '*', '/', '%', '^', '||', '~~', '!~~',
  '~~*', '!~~*', '~', '!~', '~*', '!~*', '->', '->>', '#>', '#>>', '@>', '<@', '?', '?|', '?&',
  '&&', '@@',
];

/** The app's own schemas: all but PostgreSQL's. */
const APP_SCHEMA = (column: string) =>
  `${column} NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)`;
/** Not a member of an extension (citext, PostGIS: their own C code, trusted) unless VOLATILE. */
const APP_FUNCTION = (oid: string, volatility: string) =>
  `(${volatility} = 'v' OR NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = ` +
  `'pg_proc'::regclass AND d.objid = ${oid} AND d.deptype = 'e'))`;

/**
 * One statement: what of the app's a plain read may reach without its text naming it.
 * - `functions`: names of the list the app also defines (any volatility: a STABLE function
 *   may call a VOLATILE one; any kind: an aggregate's state function may write);
 * - `operators`: operators of the list whose function is the app's;
 * - `relations`: views, materialized views and foreign tables (a view's query may call the
 *   app's function; a foreign table reaches another server);
 * - `types`: the app's domains (a CHECK may call its function), base and composite types (a
 *   cast to one may be its function: CREATE CAST … WITH FUNCTION), and the targets of its
 *   casts; not enums (their input is PostgreSQL's) nor an extension's types;
 * - `columns`: functions of a row (a composite, `record` or polymorphic first argument), which
 *   a read calls by writing them as a column: `t.receipt` is `receipt(t)` when `t` has no
 *   column of that name;
 * - `deferrable`: whether any constraint or constraint trigger may be deferred (a nested
 *   transaction's commit checks them then: see `NestedCommit`).
 */
export const SHADOWED_BUILT_INS_QUERY =
  'SELECT ARRAY(SELECT DISTINCT p.proname::text FROM pg_proc p ' +
  `WHERE ${APP_SCHEMA('p.pronamespace')} AND ${APP_FUNCTION('p.oid', 'p.provolatile')} ` +
  'AND p.proname = ANY($1::text[])) AS functions, ' +
  'ARRAY(SELECT DISTINCT o.oprname::text FROM pg_operator o JOIN pg_proc p ON p.oid = o.oprcode ' +
  `WHERE ${APP_SCHEMA('p.pronamespace')} AND ${APP_FUNCTION('p.oid', 'p.provolatile')} ` +
  'AND o.oprname = ANY($2::text[])) AS operators, ' +
  'ARRAY(SELECT DISTINCT c.relname::text FROM pg_class c ' +
  `WHERE ${APP_SCHEMA('c.relnamespace')} AND c.relkind IN ('v', 'm', 'f')) AS relations, ` +
  'ARRAY(SELECT DISTINCT t.typname::text FROM pg_type t ' +
  `WHERE ${APP_SCHEMA('t.typnamespace')} AND t.typtype IN ('b', 'c', 'd', 'r', 'm') ` +
  "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_type'::regclass " +
  "AND d.objid = t.oid AND d.deptype = 'e') " +
  'UNION SELECT t.typname::text FROM pg_cast k JOIN pg_proc p ON p.oid = k.castfunc ' +
  `JOIN pg_type t ON t.oid = k.casttarget WHERE ${APP_SCHEMA('p.pronamespace')} ` +
  `AND ${APP_FUNCTION('p.oid', 'p.provolatile')}) AS types, ` +
  'ARRAY(SELECT DISTINCT p.proname::text FROM pg_proc p JOIN pg_type t ' +
  `ON t.oid = p.proargtypes[0] WHERE ${APP_SCHEMA('p.pronamespace')} ` +
  `AND ${APP_FUNCTION('p.oid', 'p.provolatile')} AND p.pronargs >= 1 ` +
  "AND t.typtype IN ('c', 'p')) AS columns, " +
  'EXISTS (SELECT 1 FROM pg_constraint WHERE condeferrable) ' +
  'OR EXISTS (SELECT 1 FROM pg_trigger WHERE tgdeferrable) AS deferrable';

/** The catalog could not be read: nothing is known plain (see `noteCatalogUnread`). */
let catalogUnread = false;
const shadowedFunctions = new Set<string>();
const shadowedOperators = new Set<string>();
const appRelations = new Set<string>();
const appTypes = new Set<string>();
const columnFunctions = new Set<string>();
let deferrable = false;

/**
 * Names the app's database shadows (the query's answer). Kept for the process: several apps
 * in one process add theirs, which only makes fewer reads run apart.
 */
export function noteShadowedBuiltIns(shadowed: {
  functions?: string[];
  operators?: string[];
  relations?: string[];
  types?: string[];
  columns?: string[];
  deferrable?: boolean;
}) {
  if (shadowed.deferrable) deferrable = true;
  for (const name of shadowed.functions ?? []) shadowedFunctions.add(name);
  for (const name of shadowed.operators ?? []) shadowedOperators.add(name);
  for (const name of shadowed.relations ?? []) appRelations.add(name);
  for (const name of shadowed.types ?? []) appTypes.add(name);
  for (const name of shadowed.columns ?? []) columnFunctions.add(name);
}

/** The app's role may not read the catalog: no read can be proven plain. */
export function noteCatalogUnread(): void {
  catalogUnread = true;
}

/** Whether the catalog could not be read, so that no read is taken for plain. */
export function isCatalogUnread(): boolean {
  return catalogUnread;
}

/** A view, materialized view or foreign table of the app's, by name (any schema). */
export function isAppRelation(name: string): boolean {
  return appRelations.has(name);
}

/** A type of the app's a cast to may run its code, by name (any schema). */
export function isAppType(name: string): boolean {
  return appTypes.has(name);
}

/**
 * Whether the app's database may hold deferred checks (a constraint or constraint trigger
 * `DEFERRABLE`), or could not be read to tell.
 */
export function mayDefer(): boolean {
  return deferrable || catalogUnread;
}

/** A function of the app's that a read may call written as a column (`t.receipt`). */
export function isColumnFunction(name: string): boolean {
  return columnFunctions.has(name);
}

export function isShadowedFunction(name: string): boolean {
  return shadowedFunctions.has(name);
}

export function isShadowedOperator(name: string): boolean {
  return shadowedOperators.has(name);
}
