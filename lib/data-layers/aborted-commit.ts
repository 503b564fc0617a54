import { isTransactionAbortedError } from '../connection/connection-errors.js';
import { TransactionAbortedError } from '../transaction/seam-errors.js';

/**
 * Whether a nested transaction's end that failed with `error` is the `COMMIT` of an aborted
 * one (its `RELEASE` met "current transaction is aborted", 25P02): PostgreSQL completes such a
 * `COMMIT` as a `ROLLBACK`, so the savepoint is rolled back to and the end answered `ROLLBACK`.
 * Not once the request's transaction has ended (nothing is left to roll back to), and not for
 * any other failure (a deferred constraint, a lost connection), which its code meets as it is.
 */
export function commitsAborted(kind: string, error: unknown, ended: boolean): boolean {
  if (kind !== 'commit' || ended) return false;
  return isTransactionAbortedError(error) || error instanceof TransactionAbortedError;
}
