import { PermanentDatabaseError } from '../idempotency.errors.js';
import { isPermanentError } from '../storage/connection-errors.js';

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
