/**
 * Times the library reads from PostgreSQL, whatever the session's `DateStyle` (adversary 107).
 * A timestamp's text follows the session's style, which a role or database may set (`ALTER
 * DATABASE app SET DateStyle = 'German'`): `07.12.2026 07:27:01 UTC`, or `07/12/2026` in
 * 'SQL, DMY' and `12/07/2026` in 'SQL, MDY', which no parser can tell apart. So a statement of
 * the library's that returns a time returns it as milliseconds since 1970 (`epochMsOf`), text
 * no setting changes, and the library makes the `Date` (`dateOfEpochMs`). No setting of the
 * session is changed for it: the app's transaction keeps its own.
 */

/**
 * The SQL for the time `expression` as whole milliseconds since 1970, floored as node-postgres
 * reads a timestamp's text; an int8, whose text no setting changes (a float8's follows
 * `extra_float_digits`) and which the library reads in binary too (a pool with `binary: true`).
 * NULL for NULL and for `infinity` and `-infinity`, which no int8 holds.
 */
export function epochMsOf(expression: string): string {
  return `floor(extract(epoch FROM nullif(nullif(${expression}, 'infinity'), '-infinity')) * 1000)::int8`;
}

/**
 * A column made by `epochMsOf` (an int8: a string, as the library reads one; a number where a
 * parser of the app's made it one) as a `Date`; null for NULL (also an infinite time: no bound,
 * as the catalog's MINVALUE and MAXVALUE) and anything not a number.
 */
export function dateOfEpochMs(value: string | number | null | undefined): Date | null {
  if (value === null || value === undefined) return null;
  const ms = typeof value === 'number' ? value : Number(value);
  return Number.isFinite(ms) ? new Date(ms) : null;
}
