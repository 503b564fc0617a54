import pg from 'pg';

/**
 * A statement with its parameters written in as literals, for the one place the library sends
 * two statements in one round trip: the fenced last statement of a transaction and its
 * `COMMIT`, as one simple query. PostgreSQL runs a simple query's statements in order and
 * skips the rest after an error, so a fence that fails (see `raiseUnlessOneRow`) never reaches
 * the `COMMIT`. Parameters are the library's own values (ids, numbers, the stored response),
 * written with node-postgres' own escaping.
 */
export function inlineParameters(text: string, values: readonly unknown[]): string {
  return text.replace(/\$(\d+)/g, (_match, index: string) => literal(values[Number(index) - 1]));
}

function literal(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new RangeError(`not a finite number: ${value}`);
    return String(value);
  }
  if (typeof value === 'boolean') return value ? 'TRUE' : 'FALSE';
  if (Buffer.isBuffer(value)) return `decode('${value.toString('hex')}', 'hex')`;
  if (typeof value === 'string') return pg.escapeLiteral(value);
  return pg.escapeLiteral(JSON.stringify(value));
}

/**
 * The fenced `UPDATE` made to fail when it touches no row (the lease was lost), so that the
 * `COMMIT` sent with it is skipped: `1 / count(*)` divides by zero (SQLSTATE 22012) then.
 */
export function raiseUnlessOneRow(update: string): string {
  return `WITH fenced AS (${update} RETURNING 1) SELECT 1 / count(*) AS fenced FROM fenced`;
}

/** SQLSTATE 22012 from `raiseUnlessOneRow`: the fence held no row. */
export function isFenceLost(error: unknown): boolean {
  return (error as { code?: unknown } | undefined)?.code === '22012';
}
