import { PermanentDatabaseError } from '../shapes/idempotency.errors.js';
import { isPermanentError } from '../connection/connection-errors.js';

/**
 * The answer to a failure of the library's own statement in the request's transaction (the
 * fenced update that stores the answer, or a phase's recovery point) that no retry will make
 * pass: a missing privilege (42501), table, column or function. That statement runs with the
 * role and search path the transaction began with, not with any the handler set (see
 * `session-state.ts`), so the remedy is the app's database role or the migrations, never the
 * handler. A 500 `database_permanent` without `Retry-After`, never `transaction_aborted`
 * (no statement of the handler's failed) nor a 503. Undefined for any other failure.
 */
export function ownStatementFailure(error: unknown): PermanentDatabaseError | undefined {
  if (!isPermanentError(error)) return undefined;
  const { code, message } = error as { code?: string; message?: string };
  return new PermanentDatabaseError(
    error,
    `The library's own statement in the request's transaction was refused (${code}: ` +
      `${message}). It runs as the role, and with the search path, that the request's ` +
      'transaction began with (a SET LOCAL ROLE or search_path of the handler does not apply ' +
      'to it): grant that role what migrations/schema.sql grants on the idempotency tables, ' +
      'and run the migrations on the schema its search path finds.',
  );
}

/**
 * Whether a transaction of this session's own would be read-write: on a primary, with no
 * read-only default. Asked on the session whose request's transaction refused the stored
 * answer as a write (25006), after its ROLLBACK.
 */
export const READ_ONLY_BY_DEFAULT =
  "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' " +
  'AS writable';

/**
 * The answer when the request's transaction refused the stored answer as a write, on a
 * session whose transactions are otherwise read-write: the handler made it read only (`SET
 * TRANSACTION READ ONLY`, `transaction_read_only`), where the library could not see it (in a
 * function of the app's; what it can see is refused, or sent apart, before it is sent). No
 * retry passes: a 500 `database_permanent`, nothing stored, the handler's effects rolled back.
 */
export function readOnlyByHandlerFailure(error: unknown): PermanentDatabaseError {
  return new PermanentDatabaseError(
    error,
    "The request's transaction was read only when the library stored the answer, on a " +
      'session whose transactions are read-write: the handler made it read only (SET ' +
      'TRANSACTION READ ONLY, or transaction_read_only set, perhaps inside a function of the ' +
      "app's). Nothing was stored and the handler's effects rolled back. Make read-only work " +
      'a nested transaction of its own, where the mode ends with it, or run it in ' +
      'IdempotentTransaction.outside().',
  );
}
