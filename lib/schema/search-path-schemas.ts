/**
 * SQL for the schemas the role's `search_path` names but may not use. PostgreSQL leaves a
 * schema without USAGE out of the path it resolves names in (`current_schemas()`), so a table
 * there looks missing (`to_regclass`, `pg_table_is_visible`), and the checks would send the
 * user to run migrations that already ran. These read the setting itself instead.
 */

/**
 * A `WITH` item `search_path_schemas (schema, position)`: the setting's entries in order, read
 * as PostgreSQL reads them: split on the commas outside quotes; a quoted name as written (`""`
 * a quote), an unquoted one with its ASCII letters in lower case (as PostgreSQL folds it:
 * `ÉCOLE` is `École`), `"$user"` the current user, each cut to a name's 63 bytes (`::name`).
 */
export const SEARCH_PATH_SCHEMAS = `search_path_schemas AS (
  SELECT (CASE WHEN item = '$user' THEN current_user::text ELSE item END)::name::text AS schema,
    position
  FROM (SELECT CASE WHEN entry LIKE '"%"'
      THEN replace(substr(entry, 2, length(entry) - 2), '""', '"')
      ELSE translate(entry, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
      END AS item,
      position
    FROM regexp_matches(current_setting('search_path'), '\\s*("(?:[^"]|"")*"|[^,]+)', 'g')
      WITH ORDINALITY AS setting(found, position),
      LATERAL btrim(found[1]) AS entry) named
)`;

/** Whether the schema `n` (a `pg_namespace` row) is named in the path and the role lacks USAGE. */
export const UNUSABLE_IN_PATH = `(NOT has_schema_privilege(n.oid, 'USAGE')
  AND n.nspname IN (SELECT schema FROM search_path_schemas))`;

/** The place of the schema `n` in the path: the first of two unusable ones is named. */
export const PATH_POSITION = `(SELECT min(position) FROM search_path_schemas
  WHERE search_path_schemas.schema = n.nspname)`;
