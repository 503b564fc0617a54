import {
  IdempotencyCursorOpenError,
  IdempotencyStatementBesidePhaseError,
  IdempotencyHandlerRetriedInsideError,
  IdempotencyPhaseNameInvalidError,
  IdempotencyError,
  IdempotencyLeaseLostError,
  IdempotencyRunnerConnectedOutsideRequestError,
  IdempotencyStoreMisconfiguredError,
  IdempotencyStoreUnavailableError,
  IdempotencySubscriberTransactionOpenError,
  IdempotencyTransactionAbortedError,
  PermanentDatabaseError,
  RetryLaterError,
  TransientDatabaseError,
} from '../shapes/idempotency.errors.js';
import {
  isCancelAskedForError,
  isConnectionError,
  isTransientError,
} from '../connection/connection-errors.js';
import { misconfigured } from '../connection/pooler-misfit.js';
import {
  CursorOpenRefusedError,
  StatementBesidePhaseRefusedError,
  SubscriberTransactionOpenError,
  RetriedTryStatementError,
  RunnerConnectedOutsideRequestError,
  TransactionAbortedError,
  TransactionControlRefusedError,
  TransactionEndedError,
} from './seam-errors.js';

/**
 * What a failure after the handler started means for its key. Every failure has one outcome:
 * - `retry`: nothing is final. The request's transaction rolls back, nothing is stored, the
 *   lease is released, and the client gets `error` (a 503 with `Retry-After`): its retry runs
 *   the work again, after the last completed phase. A pooler's misfit goes this way too, as
 *   a 500 `store_misconfigured`: it lasts until the operator changes the configuration; and
 *   so does a permanent database error of the library's own statements (a missing table, a
 *   privilege), as a 500 `database_permanent` without `Retry-After`.
 * - `lease-lost`: another worker owns the key. Everything rolls back; the client gets a 409
 *   and its retry receives the new owner's stored answer.
 * - `final`: the handler's own answer (a 404 it threw, a bug's 500). Its effects roll back,
 *   and the response the exception filters write is stored and replayed.
 */
export type Failure =
  | { kind: 'retry'; error: IdempotencyError }
  | { kind: 'lease-lost'; error: IdempotencyLeaseLostError }
  | { kind: 'final' };

/**
 * Whether a handler's error says it was not done in time rather than what it did: a 408 or a
 * 504 (`RequestTimeoutException`, `GatewayTimeoutException`, any error whose `getStatus()`
 * says so), or RxJS' `TimeoutError` (a `timeout()` operator of an interceptor inside
 * `@Idempotent()`, not mapped). Its work may still be under way (a timeout does not stop a
 * handler), so it is no answer to store for ever: the work is rolled back and the key given
 * back, and the error goes to the exception filters as it is (the client gets the app's 408).
 */
export function isTimeoutError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  if ((error as { name?: unknown }).name === 'TimeoutError') return true;
  const getStatus = (error as { getStatus?: unknown }).getStatus;
  if (typeof getStatus !== 'function') return false;
  const status: unknown = getStatus.call(error);
  return status === 408 || status === 504;
}

/**
 * Classifies what a handler (or a phase) threw. Classifying the error of a `retry` or
 * `lease-lost` again gives the same failure: the library's own wrapper of a refusal
 * (`IdempotencyCursorOpenError`, `IdempotencyRunnerConnectedOutsideRequestError`, ...) that
 * `PhaseRunner` hands on from a phase or `finish()` is judged as what it wraps, never as the
 * handler's final answer to store (adversary 98).
 */
export function classifyHandlerError(error: unknown): Failure {
  const known = typeof error === 'object' && error !== null ? CLASSIFIED.get(error) : undefined;
  if (known) return known;
  const failure = classifyAnew(error);
  if (failure.kind !== 'final') CLASSIFIED.set(failure.error, failure);
  return failure;
}

/**
 * The failures `classifyHandlerError` gave, by the error they answer with: the classification
 * its wrapper carries, wherever it is thrown on (a phase's, a job's, a handler's own rethrow).
 */
const CLASSIFIED = new WeakMap<object, Failure>();

/**
 * What becomes of a request whose transaction the seam refused (`RequestTransaction.refusal`,
 * a phase's included), whatever its handler made of the refusal afterwards (let it out, caught
 * it and threw its own 409 or `Error`, or answered anyway):
 * - `own`: never stored; answered with the refusal's own code (`cursor_open`, ...).
 * - `aborted`: never stored; answered 500 `transaction_aborted` with the refusal's message
 *   (the documented "nothing committed or stored" of a concurrent save, a nested transaction
 *   left open at the commit, a savepoint across runners).
 * - `stored`: the handler's error answer is stored, its effects rolled back (the documented
 *   "as the filters render it ... the error answer stored"); answered anyway, its commit is
 *   refused: 500 `transaction_aborted`, nothing stored.
 * Every refusal the transaction can record is named here (see failure.spec.ts); one it does
 * not know is `stored`, as before.
 */
export type RefusalFate = 'own' | 'aborted' | 'stored';

export const REFUSAL_FATES: Readonly<Record<string, RefusalFate>> = {
  CursorOpenRefusedError: 'own',
  StatementBesidePhaseRefusedError: 'own',
  SubscriberTransactionOpenError: 'own',
  RunnerConnectedOutsideRequestError: 'own',
  SessionSetBeforeHandlerError: 'own',
  ClientTakenElsewhereError: 'own',
  KeptClientTransactionGoneError: 'own',
  KeptClientCommittedElsewhereError: 'own',
  ConcurrentSaveFailedError: 'aborted',
  NestedTransactionOpenAtCommitError: 'aborted',
  SavepointAcrossRunnersError: 'aborted',
  TransactionControlRefusedError: 'stored',
  SessionAdvisoryLockRefusedError: 'stored',
  SessionSettingRefusedError: 'stored',
  ReadOnlyTransactionRefusedError: 'stored',
  UnreadableStatementRefusedError: 'stored',
  ListenAmongStatementsRefusedError: 'stored',
  StatementBesideNestedTransactionError: 'stored',
  NestedTurnTimeoutError: 'stored',
};

/** What becomes of a request refused with `refusal` (see `RefusalFate`); none for no refusal. */
export function refusalFate(refusal: unknown): RefusalFate | undefined {
  if (!(refusal instanceof TransactionControlRefusedError)) return undefined;
  // By its name, else by the refusal it extends (a subclass is answered as its parent is).
  for (let at: object | null = refusal; at; at = Object.getPrototypeOf(at) as object | null) {
    const name = Object.hasOwn(at, 'name') ? (at as { name?: unknown }).name : undefined;
    const fate = typeof name === 'string' ? REFUSAL_FATES[name] : undefined;
    if (fate) return fate;
    const constructorName = (at as { constructor?: { name?: unknown } }).constructor?.name;
    const inherited =
      typeof constructorName === 'string' ? REFUSAL_FATES[constructorName] : undefined;
    if (inherited) return inherited;
  }
  return 'stored';
}

/** How strongly each fate holds the request: a later refusal replaces a weaker one. */
const FATE_STRENGTH: Readonly<Record<RefusalFate, number>> = { stored: 0, aborted: 1, own: 2 };

/**
 * The refusal a request keeps (`RequestTransaction.refusal`) when it meets `met` while it
 * carries `kept`: the one with the strongest fate (`own` over `aborted` over `stored`), and
 * within a fate the first. A caught `stored`-fate refusal (a best-effort advisory lock) met
 * before a never-stored one (`cursor_open`) must not let the handler's own answer to the
 * second be stored (adversary 102).
 */
export function strongerRefusal<T>(kept: T | undefined, met: T): T {
  if (kept === undefined) return met;
  const strength = (refusal: T) => FATE_STRENGTH[refusalFate(refusal) ?? 'stored'];
  return strength(met) > strength(kept) ? met : kept;
}

/**
 * What a refusal becomes once its code caught it and went on: the only way a phase, a
 * `call()` or `finish()` of the request can start after it. `own` and `aborted` are answered so
 * whatever the handler does next; a caught `stored` one can no longer have the handler's error
 * answer stored unless the handler throws one, and answered anyway its commit is refused (500
 * `transaction_aborted`, "nothing committed or stored"): its fate is then `aborted`. So nothing
 * started after any refusal may commit (adversary 103: a charge committed past a caught
 * best-effort lock while every answer said nothing committed).
 */
export const CAUGHT_FATES: Readonly<Record<RefusalFate, RefusalFate>> = {
  own: 'own',
  aborted: 'aborted',
  stored: 'aborted',
};

/**
 * What a phase, a `call()` or `finish()` started after `refusal` throws before anything of it
 * runs (none without a refusal), by the refusal's fate once caught (`CAUGHT_FATES`): one whose
 * own fate rolls back is thrown again, answered as it is; a caught `stored` one is thrown as the
 * refused commit it leads to (`TransactionAbortedError`: 500 `transaction_aborted`, never
 * stored), so that the handler letting it out is answered as its own commit would be, and one
 * that catches it and throws its own error still has that error's answer stored.
 */
export function refusedAfter(refusal: unknown): Error | undefined {
  const fate = refusalFate(refusal);
  if (fate === undefined) return undefined;
  const error = refusal as TransactionControlRefusedError;
  return fate === CAUGHT_FATES[fate] ? error : new TransactionAbortedError(error);
}

/**
 * The answer of a request whose transaction the seam refused (`refusal`), whatever its
 * handler made of the refusal: the refusal's, never stored, when its fate is `own` or
 * `aborted`; otherwise `undefined`, and the handler's answer stands.
 */
export function refusalAnswer(refusal: unknown): IdempotencyError | undefined {
  const fate = refusalFate(refusal);
  if (fate === 'own') {
    const failure = classifyHandlerError(refusal);
    return failure.kind === 'retry' ? failure.error : undefined;
  }
  if (fate === 'aborted') return classifyCommitError(new TransactionAbortedError(refusal));
  return undefined;
}

function classifyAnew(error: unknown): Failure {
  // A refusal of the seam's that a data layer wrapped (TypeORM's QueryFailedError holds it as
  // its driverError when it was raised inside its query()): judged as the refusal itself.
  const wrapped = seamRefusalIn(error);
  if (wrapped) return classifyHandlerError(wrapped);
  // A transaction its code went on with after a statement failed (and caught it) could not
  // commit: what it met is that statement's failure (a deadlock: 503; a constraint: final).
  // A refusal its code caught and went on from (the transaction could then only roll back):
  // what the request met is the refusal, answered as the request's own refused commit is
  // (500 `transaction_aborted`, never stored), in a phase as in the handler (adversary 100).
  if (error instanceof TransactionAbortedError) {
    const met = classifyHandlerError(error.cause);
    if (met.kind !== 'final' || !(error.cause instanceof TransactionControlRefusedError))
      return met;
    return { kind: 'retry', error: classifyCommitError(error) };
  }
  // A refusal never stored (`REFUSAL_FATES`), let out: rolled back, answered 500.
  if (refusalFate(error) === 'aborted') {
    return { kind: 'retry', error: classifyCommitError(new TransactionAbortedError(error)) };
  }
  if (error instanceof IdempotencyLeaseLostError) return { kind: 'lease-lost', error };
  if (
    error instanceof RetryLaterError ||
    error instanceof IdempotencyStoreUnavailableError ||
    error instanceof IdempotencyStoreMisconfiguredError ||
    error instanceof TransientDatabaseError ||
    error instanceof PermanentDatabaseError
  ) {
    return { kind: 'retry', error };
  }
  // The handler called again inside `@Idempotent()` after it wrote: rolled back, not stored.
  if (
    error instanceof IdempotencyHandlerRetriedInsideError ||
    error instanceof IdempotencyPhaseNameInvalidError
  ) {
    return { kind: 'retry', error };
  }
  // Work of a try retried since that this try awaited (a single-flight Promise the first try
  // started): the two tries' work cannot be told apart in one transaction. Not stored; a
  // request of its own runs it afresh.
  if (error instanceof RetriedTryStatementError) {
    return { kind: 'retry', error: new IdempotencyHandlerRetriedInsideError(undefined) };
  }
  // The library's answer to a refusal of the seam's, handed on (by `PhaseRunner`, by
  // `classifyCommitError`, by a handler that rethrows it): the refusal's own road.
  if (
    error instanceof IdempotencyCursorOpenError ||
    error instanceof IdempotencyStatementBesidePhaseError ||
    error instanceof IdempotencySubscriberTransactionOpenError ||
    error instanceof IdempotencyRunnerConnectedOutsideRequestError
  ) {
    return { kind: 'retry', error };
  }
  // A refusal of the seam's: the request rolls back and answers it; nothing is stored.
  if (error instanceof CursorOpenRefusedError) {
    return { kind: 'retry', error: new IdempotencyCursorOpenError(error) };
  }
  if (error instanceof StatementBesidePhaseRefusedError) {
    return { kind: 'retry', error: new IdempotencyStatementBesidePhaseError(error) };
  }
  if (error instanceof SubscriberTransactionOpenError) {
    return { kind: 'retry', error: new IdempotencySubscriberTransactionOpenError(error) };
  }
  if (error instanceof RunnerConnectedOutsideRequestError) {
    return { kind: 'retry', error: new IdempotencyRunnerConnectedOutsideRequestError(error) };
  }
  // The request's own code's cancel of a statement on the request's connection, or end of
  // it (Kysely's 'cancel query' or 'kill session' abort, seen by `watchCancels`): it aborted
  // the request's transaction, which no answer of the handler's can store, and its retry asks
  // for the same. Answered as what it is, never "retry later". Anyone else's cancel (an
  // operator's, a pooler's) is a passing failure, answered below.
  if (isCancelAskedForError(error)) {
    return { kind: 'retry', error: new IdempotencyTransactionAbortedError(error) };
  }
  const database = databaseFailure(error);
  return database ? { kind: 'retry', error: database } : { kind: 'final' };
}

/**
 * The error to answer when the request's transaction could not commit: a 503 when nothing
 * about it is final (the database was unreachable, slow, or rolled back for a passing
 * reason), a 500 when a statement had failed and aborted the transaction. Nothing is stored
 * in either case; the caller releases the lease.
 */
export function classifyCommitError(error: unknown): IdempotencyError {
  if (error instanceof TransactionAbortedError) {
    const wrapped = seamRefusalIn(error.cause);
    if (wrapped) return classifyCommitError(new TransactionAbortedError(wrapped));
  }
  if (error instanceof TransactionAbortedError) {
    if (error.cause instanceof CursorOpenRefusedError) {
      return new IdempotencyCursorOpenError(error.cause);
    }
    if (error.cause instanceof StatementBesidePhaseRefusedError) {
      return new IdempotencyStatementBesidePhaseError(error.cause);
    }
    if (error.cause instanceof SubscriberTransactionOpenError) {
      return new IdempotencySubscriberTransactionOpenError(error.cause);
    }
    if (error.cause instanceof RunnerConnectedOutsideRequestError) {
      return new IdempotencyRunnerConnectedOutsideRequestError(error.cause);
    }
    if (isCancelAskedForError(error.cause)) {
      return new IdempotencyTransactionAbortedError(error.cause);
    }
    return databaseFailure(error.cause) ?? new IdempotencyTransactionAbortedError(error.cause);
  }
  if (error instanceof IdempotencyError) return error;
  if (isCancelAskedForError(error)) return new IdempotencyTransactionAbortedError(error);
  return databaseFailure(error) ?? new IdempotencyTransactionAbortedError(error);
}

/**
 * A database error that a retry may not meet again, as the library's 503. Only errors that
 * came from the database count (see `connection-errors.ts`): the same network code from the
 * handler's own HTTP call is its final answer. A wait the client gave up on (the module's
 * deadline, node-postgres' `query_timeout`) is `store_unavailable`, not `database_transient`:
 * PostgreSQL rolled nothing back, the statement's outcome is unknown, and the connection is
 * dropped, exactly as when the database cannot be reached. A pooler's misfit, which a retry
 * meets every time, is its 500 (stored no more than a 503 is).
 */
function databaseFailure(error: unknown): IdempotencyError | undefined {
  const misfit = misconfigured(error);
  if (misfit) return misfit;
  if (isConnectionError(error)) {
    return new IdempotencyStoreUnavailableError(error, 1, true);
  }
  if (isTransientError(error)) return new TransientDatabaseError(error);
  return undefined;
}

/**
 * Whether a failure is the database's passing trouble, which a consumer never counts against
 * its message (the message goes back after a backoff, however often): only a `retry` that
 * another attempt may not meet. A permanent database error (a missing table, a privilege) is
 * met by every delivery, so it counts: the message is given up after `maxAttempts`, by this
 * process's own count when the database cannot keep one (its failure table may be missing too).
 */
export function isPassing(failure: Failure): boolean {
  return (
    failure.kind === 'retry' &&
    !(failure.error instanceof PermanentDatabaseError) &&
    !(failure.error instanceof IdempotencyTransactionAbortedError) &&
    !(failure.error instanceof IdempotencyCursorOpenError) &&
    !(failure.error instanceof IdempotencySubscriberTransactionOpenError) &&
    !(failure.error instanceof IdempotencyRunnerConnectedOutsideRequestError) &&
    !(failure.error instanceof IdempotencyHandlerRetriedInsideError) &&
    !(failure.error instanceof IdempotencyPhaseNameInvalidError)
  );
}

/** The refusal of the seam's a data layer's error wraps (TypeORM's `driverError`), if any. */
function seamRefusalIn(error: unknown): Error | undefined {
  const inner = (error as { driverError?: unknown } | null | undefined)?.driverError;
  return inner instanceof TransactionControlRefusedError ||
    inner instanceof RetriedTryStatementError ||
    inner instanceof TransactionEndedError
    ? inner
    : undefined;
}
