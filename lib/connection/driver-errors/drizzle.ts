/**
 * Drizzle (drizzle-orm 0.44 and later) wraps whatever the driver raised under a statement in a
 * `DrizzleQueryError`: its message `Failed query: <sql>\nparams: <params>`, the statement as
 * `query` and `params`, and the driver's own error (node-postgres' `DatabaseError`, or the
 * socket's or pg-pool's error) as `cause`. The library does not import drizzle-orm (an app
 * without it must load the library), so it knows the wrapper by that shape; TypeORM's
 * `QueryFailedError` has a `query` too, but `parameters` and `driverError`, never `params`.
 */
export function drizzleCause(error: unknown): unknown {
  if (typeof error !== 'object' || error === null) return undefined;
  const { query, params, message, cause } = error as {
    query?: unknown;
    params?: unknown;
    message?: unknown;
    cause?: unknown;
  };
  const wrapped =
    typeof query === 'string' &&
    Array.isArray(params) &&
    typeof message === 'string' &&
    message.startsWith('Failed query: ');
  return wrapped ? cause : undefined;
}
