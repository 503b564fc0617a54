/**
 * Kysely's PostgresDialect hands node-postgres' errors on as they are (a `DatabaseError`, a
 * socket's error, `Connection terminated unexpectedly`): only its stack is extended. The one
 * error of its own that may carry the driver's is `AbortedTransactionError` ("the database
 * rolled back instead of committing"): the PostgresDialect raises it with no cause (COMMIT
 * answered ROLLBACK), other dialects with the driver's error as its `cause`.
 *
 * Recognised by the symbol Kysely marks it with (`Symbol.for`, so across copies of the
 * package and across realms), never by importing Kysely: the library does not depend on it.
 */
const ABORTED_TRANSACTION = Symbol.for('kysely.AbortedTransactionError');

/**
 * The node-postgres error (or the socket's error) inside one of Kysely's errors; undefined
 * when `error` is not Kysely's wrapper of one (Kysely's pass-through errors are the driver's
 * own already, and are classified as they are).
 *
 * @example kyselyCause(new AbortedTransactionError({ cause: pgError })) === pgError
 */
export function kyselyCause(error: unknown): unknown {
  if (typeof error !== 'object' || error === null || !(ABORTED_TRANSACTION in error)) {
    return undefined;
  }
  return (error as { cause?: unknown }).cause;
}
