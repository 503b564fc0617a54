/**
 * PostgreSQL's own functions and operators a plain read may call (see `isPlainRead`), and the
 * names among them that the app's database also defines, outside `pg_catalog`, as something
 * that may write. A name is resolved by its arguments too: with the app's `lower(integer)`,
 * `SELECT lower(5)` calls the app's, not PostgreSQL's `lower(text)`; an operator is a function
 * by another name. Read once with the start-up's first statement (`IdempotencyDatabase`):
 * only a VOLATILE definition may write (PostgreSQL refuses a write in a STABLE or IMMUTABLE
 * SQL or PL/pgSQL function), so an extension's immutable `=` (citext, PostGIS) shadows
 * nothing. What the app defines while it runs is met at its restart.
 */

/**
 * PostgreSQL's functions that have no effect beyond their result and take no lock (what
 * TypeORM's reads and counts use, and what the SQL syntax of `EXTRACT`, `TRIM`, `SUBSTRING`
 * and `POSITION` calls), by their name in `pg_catalog`.
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
  'ltrim', 'rtrim', 'overlay', 'timezone',
];

/** The operators of comparisons, arithmetic, text, JSON and arrays a plain read may use. */
// prettier-ignore
export const PLAIN_OPERATORS: readonly string[] = [
  '=', '<>', '!=', '<', '>', '<=', '>=', '+', '-', '*', '/', '%', '^', '||', '~~', '!~~',
  '~~*', '!~~*', '~', '!~', '~*', '!~*', '->', '->>', '#>', '#>>', '@>', '<@', '?', '?|', '?&',
  '&&',
];

/** One statement: the shadowing definitions among those names, VOLATILE, outside pg_catalog. */
export const SHADOWED_BUILT_INS_QUERY =
  'SELECT ARRAY(SELECT DISTINCT p.proname::text FROM pg_proc p ' +
  "WHERE p.pronamespace <> 'pg_catalog'::regnamespace AND p.provolatile = 'v' " +
  'AND p.proname = ANY($1::text[])) AS functions, ' +
  'ARRAY(SELECT DISTINCT o.oprname::text FROM pg_operator o JOIN pg_proc p ON p.oid = o.oprcode ' +
  "WHERE o.oprnamespace <> 'pg_catalog'::regnamespace AND p.provolatile = 'v' " +
  'AND o.oprname = ANY($2::text[])) AS operators';

const shadowedFunctions = new Set<string>();
const shadowedOperators = new Set<string>();

/**
 * Names the app's database shadows (the query's answer). Kept for the process: several apps
 * in one process add theirs, which only makes fewer reads run apart.
 */
export function noteShadowedBuiltIns(shadowed: { functions?: string[]; operators?: string[] }) {
  for (const name of shadowed.functions ?? []) shadowedFunctions.add(name);
  for (const name of shadowed.operators ?? []) shadowedOperators.add(name);
}

export function isShadowedFunction(name: string): boolean {
  return shadowedFunctions.has(name);
}

export function isShadowedOperator(name: string): boolean {
  return shadowedOperators.has(name);
}
