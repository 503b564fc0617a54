/**
 * Domain errors: each carries a stable `code` and no HTTP. `toProblem()` in
 * `http/problem.ts` is the one place that maps them to status codes.
 */

export type IdempotencyErrorCode =
  | 'key_missing'
  | 'key_invalid'
  | 'tenant_invalid'
  | 'key_mismatch'
  | 'key_in_progress'
  | 'lease_lost'
  | 'store_unavailable'
  | 'store_misconfigured'
  | 'request_invalid'
  | 'retry_later'
  | 'database_transient'
  | 'database_permanent'
  | 'transaction_aborted'
  | 'cursor_open'
  | 'subscriber_transaction_open'
  | 'runner_connected_outside_request'
  | 'statement_beside_phase'
  | 'handler_retried_inside'
  | 'phase_name_invalid'
  | 'response_too_large'
  | 'stored_response_unreadable';

/** Base class: catch this to handle every condition the library reports. */
export abstract class IdempotencyError extends Error {
  abstract readonly code: IdempotencyErrorCode;
}

/** The route requires a key and the request has none. */
export class IdempotencyKeyMissingError extends IdempotencyError {
  readonly code = 'key_missing';
  /** `where`: where the route reads its key, as "the Idempotency-Key header". */
  constructor(readonly where: string) {
    super(`${capitalized(where)} is required on this route; send one key per operation.`);
    this.name = 'IdempotencyKeyMissingError';
  }
}

/** The key is empty, too long, not visible ASCII, or sent more than once. */
export class IdempotencyKeyInvalidError extends IdempotencyError {
  readonly code = 'key_invalid';
  constructor(
    readonly where: string,
    readonly reason: string,
  ) {
    super(`${capitalized(where)} is invalid: ${reason}.`);
    this.name = 'IdempotencyKeyInvalidError';
  }
}

/**
 * The tenant resolver gave no usable tenant id for this request; the message names `rule`, the
 * rule the value breaks, when the caller read it (`readTenantId`: the errors import nothing of
 * the decisions, which import them).
 */
export class IdempotencyTenantInvalidError extends IdempotencyError {
  readonly code = 'tenant_invalid';
  constructor(
    readonly value: unknown,
    rule?: string,
  ) {
    super(
      'The request carries no valid tenant id' +
        (rule === undefined ? '' : `: ${rule}`) +
        '. A tenant id is an integer, or 1 to 255 characters, not all white space, without ' +
        'control characters or lone surrogates; idempotency keys are scoped per tenant.',
    );
    this.name = 'IdempotencyTenantInvalidError';
  }
}

/** The key was first used with another request (method, path or body). */
export class IdempotencyKeyMismatchError extends IdempotencyError {
  readonly code = 'key_mismatch';
  constructor() {
    super(
      'This idempotency key was already used with a different request (method, path or body); ' +
        'use a new key for a new operation.',
    );
    this.name = 'IdempotencyKeyMismatchError';
  }
}

/** Another request holds a valid lease on the key. */
export class IdempotencyKeyInProgressError extends IdempotencyError {
  readonly code = 'key_in_progress';
  constructor(readonly retryAfterSeconds: number) {
    super('A request with this idempotency key is still being processed; retry later.');
    this.name = 'IdempotencyKeyInProgressError';
  }
}

/** This worker's lease expired and another worker took the key over: nothing was committed. */
export class IdempotencyLeaseLostError extends IdempotencyError {
  readonly code = 'lease_lost';
  constructor(readonly retryAfterSeconds = 1) {
    super(
      'This request lost its claim on the idempotency key to another worker; ' +
        'retry to receive the stored result.',
    );
    this.name = 'IdempotencyLeaseLostError';
  }
}

/** The database could not be reached in time: nothing was executed. */
export class IdempotencyStoreUnavailableError extends IdempotencyError {
  readonly code = 'store_unavailable';
  constructor(
    override readonly cause: unknown,
    readonly retryAfterSeconds = 1,
    /** Whether the handler had run: then only its response could not be stored. */
    readonly afterExecution = false,
  ) {
    super(
      afterExecution
        ? 'The idempotency store became unavailable before the response could be stored. ' +
            'Retry later with the same key: completed atomic phases are not run again.'
        : 'The idempotency store is unavailable; nothing was executed. Retry later.',
    );
    this.name = 'IdempotencyStoreUnavailableError';
  }
}

/**
 * The database connection cannot run the library's statements as they are configured (a
 * pooler in transaction mode shares its server sessions, so a session's prepared statements
 * are missing, or already there, on the next one): a lasting misfit, not a passing outage, so
 * a 500 rather than a 503 with `Retry-After`. Nothing is stored for the key, and the log says
 * what to change (`explanation`).
 */
export class IdempotencyStoreMisconfiguredError extends IdempotencyError {
  readonly code = 'store_misconfigured';
  constructor(
    override readonly cause: unknown,
    /** What is wrong and what to change, for the operator (logged, never sent). */
    readonly explanation: string,
  ) {
    super(
      'The idempotency store cannot run on its database connection as configured; nothing ' +
        'was stored. Retrying will not help until the server is reconfigured.',
    );
    this.name = 'IdempotencyStoreMisconfiguredError';
  }
}

/** The body cannot be read as the JSON its content type announces (e.g. duplicate keys). */
export class IdempotencyRequestInvalidError extends IdempotencyError {
  readonly code = 'request_invalid';
  constructor(readonly reason: string) {
    super(`The request body cannot be fingerprinted: ${reason}.`);
    this.name = 'IdempotencyRequestInvalidError';
  }
}

/**
 * Thrown by a handler (or a phase) when a dependency is down: nothing is stored, the lease
 * is released, and a retry with the same key resumes after the last completed phase.
 *
 * @example throw new RetryLaterError('The PSP did not answer in time', 2);
 */
export class RetryLaterError extends IdempotencyError {
  readonly code = 'retry_later';
  constructor(
    message = 'A dependency is unavailable; retry later with the same key.',
    readonly retryAfterSeconds = 1,
    readonly body?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'RetryLaterError';
  }
}

/**
 * The database rolled the request's work back for a passing reason: a deadlock or a
 * serialization failure (SQLSTATE class 40), a statement timeout (57014) or a lock timeout
 * (55P03). Nothing was stored and the lease is released: a retry with the same key runs the
 * work again, after the last completed phase.
 */
export class TransientDatabaseError extends IdempotencyError {
  readonly code = 'database_transient';
  constructor(
    override readonly cause: unknown,
    readonly retryAfterSeconds = 1,
  ) {
    super(
      'The database rolled this request back for a passing reason (a deadlock, a serialization ' +
        'failure, a statement or lock timeout); nothing was stored. Retry with the same key.',
    );
    this.name = 'TransientDatabaseError';
  }
}

/**
 * The database refused the library's own statement for a reason that lasts: a table, column or
 * function of the library's schema is missing (the migrations did not run, or not all of them),
 * the app's role lacks a privilege on it, or its sessions are read-only by the app's own
 * database, role or connection settings (not a standby or a failover's fence, which pass). A
 * retry meets the same refusal until an operator acts, so this is a 500 without `Retry-After`,
 * never a 503; nothing is stored for the key. `explanation` (logged, never sent) says what to do.
 */
export class PermanentDatabaseError extends IdempotencyError {
  readonly code = 'database_permanent';
  constructor(
    override readonly cause: unknown,
    /** What is wrong and what to change, for the operator. */
    readonly explanation = String(cause),
  ) {
    super(
      'The database refused the idempotency store for a reason that lasts (a missing table, ' +
        'column or function, a missing privilege, a read-only session, a character it cannot ' +
        'store); nothing was stored. ' +
        'Retrying will not help until the database is fixed.',
    );
    this.name = 'PermanentDatabaseError';
  }
}

/**
 * A statement of the request's transaction failed and the handler went on as if it had not:
 * PostgreSQL had aborted the transaction, so none of the handler's effects could commit, and
 * its answer, which assumed they did, was not stored. To recover from an expected error (a
 * unique violation, say), run that statement in a nested transaction (`manager.transaction()`
 * makes a savepoint) or use `INSERT ... ON CONFLICT`.
 */
export class IdempotencyTransactionAbortedError extends IdempotencyError {
  readonly code = 'transaction_aborted';
  constructor(override readonly cause: unknown) {
    super(
      "A statement of this request's transaction failed and the handler went on; nothing was " +
        'committed or stored. Retrying runs the request again.',
    );
    this.name = 'IdempotencyTransactionAbortedError';
  }
}

/**
 * An interceptor inside `@Idempotent()` (one written above it on the method: a `retry()`)
 * called the route's handler again while its try before still ran (a `timeout()` gave up on
 * it) or after that try had sent statements in the request's transaction. Its work cannot be
 * undone apart from the rest of the request, so it would commit with the next try's answer
 * (a double effect): the
 * request rolled back instead, and nothing was stored. A retry meets the same refusal until the
 * decorators change, so this is a 500, not a 503.
 */
export class IdempotencyHandlerRetriedInsideError extends IdempotencyError {
  readonly code = 'handler_retried_inside';
  constructor(readonly route: string | undefined) {
    super(
      `The handler${route ? ` of ${route}` : ''} was called again from outside itself (an ` +
        'interceptor inside @Idempotent(), a retry or a hedge; or the handler from its own ' +
        "Observable answer) while its try before was still running or had sent statements in the request's " +
        "transaction, where that try's work cannot be undone apart; the request rolled back " +
        'and nothing was committed or stored. Write @Idempotent() above your retry interceptor ' +
        '(outside it), so that each try runs in a transaction of its own; a handler that goes ' +
        'on from its own answer calls a method without @Idempotent().',
    );
    this.name = 'IdempotencyHandlerRetriedInsideError';
  }
}

/**
 * A phase's name that PostgreSQL cannot hold as it is (a NUL, or a lone surrogate: a label
 * cut inside an emoji): its recovery point would fail after its work or call was made, or be
 * recorded under another name, which the retry then does not find and runs the phase again.
 * Refused before anything of the phase runs; the request rolled back, nothing stored.
 */
export class IdempotencyPhaseNameInvalidError extends IdempotencyError {
  readonly code = 'phase_name_invalid';
  constructor(readonly phase: string) {
    super(
      `The phase name ${JSON.stringify(phase)} holds a NUL or half of a character (a lone ` +
        'surrogate), which PostgreSQL cannot record as it is: refused before the phase ran; ' +
        'nothing was committed or stored. Name phases with whole text (cut labels with ' +
        'Array.from(text).slice(), not text.slice(), or name them by an id).',
    );
    this.name = 'IdempotencyPhaseNameInvalidError';
  }
}

/**
 * A statement of the request's own was sent while one of its atomic phases ran (a phase and
 * a write in one `Promise.all`): it would have begun the request's transaction and held its
 * locks until the answer, where a phase touching the same rows waits on it for ever. Refused
 * at once; the request rolled back and nothing was stored (what the phases committed stays:
 * a retry resumes after them). A 500: the code has the order to fix.
 */
export class IdempotencyStatementBesidePhaseError extends IdempotencyError {
  readonly code = 'statement_beside_phase';
  constructor(override readonly cause: unknown) {
    super(
      "A statement of this request (a write, or a read that would begin the request's " +
        'transaction: a locking read, a read of a view, a WITH, any read above READ ' +
        'COMMITTED) was sent while one of its atomic phases was running, ' +
        "where it would have begun the request's transaction and held its locks until the " +
        'answer (a phase touching the same rows would wait on it forever); the request rolled ' +
        'back and nothing was stored. Await each phase before writing outside it (or write in ' +
        'finish()), or put the write inside the phase.',
    );
    this.name = 'IdempotencyStatementBesidePhaseError';
  }
}

/**
 * A statement of the request was sent while a cursor (a stream: Kysely's `stream()`,
 * pg-cursor, pg-query-stream) was open on the request's connection. On the pool seam every
 * statement of an idempotent request runs on that one connection, where the statement would
 * wait for the cursor to end, and the cursor's reader for the statement: forever, with the key
 * held. It was refused at once instead; the request rolled back and nothing was stored. A
 * retry meets the same refusal until the code changes, so this is a 500, not a 503.
 */
export class IdempotencyCursorOpenError extends IdempotencyError {
  readonly code = 'cursor_open';
  constructor(override readonly cause: unknown) {
    super(
      "A statement was sent while a cursor (a stream) was open on this request's connection, " +
        'where it would have waited for the cursor to end; the request rolled back and nothing ' +
        'was committed or stored. Read the stream to its end before writing, or read its rows ' +
        'with execute() (in pages if they are many).',
    );
    this.name = 'IdempotencyCursorOpenError';
  }
}

/**
 * A TypeORM transaction subscriber (`beforeTransactionStart`, `afterTransactionStart`,
 * `beforeTransactionCommit`, `beforeTransactionRollback`) started a transaction of the request
 * and returned (or awaited other work) while it was still open. On the request's one connection
 * TypeORM names savepoints by depth: the step the subscriber ran before (the SAVEPOINT, RELEASE
 * or ROLLBACK TO) would have named that transaction's savepoint, not its own. It was refused
 * instead; the request rolled back and nothing was stored. A retry meets the same refusal until
 * the code changes, so this is a 500, not a 503.
 */
export class IdempotencySubscriberTransactionOpenError extends IdempotencyError {
  readonly code = 'subscriber_transaction_open';
  constructor(override readonly cause: unknown) {
    super(
      'A TypeORM transaction subscriber started a transaction of this request and left it open ' +
        'past the start, commit or rollback it was told of, which on the request’s one ' +
        'connection would have ended the wrong savepoint; the request rolled back and nothing ' +
        'was committed or stored. Await such a transaction in the subscriber before anything ' +
        'else, or start it from a beforeTransactionCommit subscriber without awaiting ' +
        'anything after it, or run it in IdempotentTransaction.outside().',
    );
    this.name = 'IdempotencySubscriberTransactionOpenError';
  }
}

/**
 * The detail of `runner_connected_outside_request` for a client of the pool kept across
 * requests with a transaction of its code's open (adversary 104), by the refusal's name: the
 * pattern named, and what to do.
 */
const RUNNER_DETAILS: Readonly<Record<string, string>> = {
  KeptClientTransactionGoneError:
    'A node-postgres client taken with pool.connect() in another request and kept, with a ' +
    'transaction its code began (BEGIN) still open when that request ended, was used in this ' +
    'one: that transaction rolled back with the request that took it, so nothing can run in ' +
    'it; the request rolled back and nothing was committed or stored. A client’s own ' +
    'transaction cannot outlive the request it was taken in: take a client kept across ' +
    'requests with pool.connect() in IdempotentTransaction.outside().',
  KeptClientCommittedElsewhereError:
    'This request sent COMMIT on a node-postgres client taken with pool.connect() in another ' +
    'request and kept, with a transaction its code began (BEGIN) there still open: that ' +
    'transaction is part of the request that took the client and commits or rolls back with ' +
    'it, so the COMMIT was refused before it was sent; this request rolled back and nothing ' +
    'was committed or stored. A client’s own transaction cannot outlive the request it was ' +
    'taken in: take a client kept across requests with pool.connect() inside ' +
    'IdempotentTransaction.outside(), so its transactions are its own.',
};

/**
 * A TypeORM query runner connected before the request began (a guard's `SET search_path` on a
 * `Scope.REQUEST` unit of work's runner) was used in the request: its session is its own
 * connection's, and its statements can be placed neither there nor in the request's transaction
 * without changing what they mean. They were refused; the request rolled back and nothing was
 * committed or stored. A retry meets the same refusal until the code changes, so this is a 500,
 * not a 503.
 */
export class IdempotencyRunnerConnectedOutsideRequestError extends IdempotencyError {
  readonly code = 'runner_connected_outside_request';
  constructor(override readonly cause: unknown) {
    super(
      RUNNER_DETAILS[String((cause as { name?: unknown } | null)?.name)] ??
        ((cause as { name?: unknown } | null)?.name === 'ClientTakenElsewhereError'
          ? 'A node-postgres client this request did not take (taken before it, or kept from ' +
            'another request or phase) was used in it: its writes would commit apart from the ' +
            'request, so they were refused; the request rolled back and nothing was committed ' +
            'or stored. Use pool.query(), or take the client with pool.connect() inside the ' +
            'handler (or phase) and release it there.'
          : 'A TypeORM query runner connected before this request began (in a guard) was used in ' +
            'it, or a SET LOCAL was sent before its handler started (in an interceptor or a ' +
            'pipe): that session (search path, role, settings) is not the request’s ' +
            'transaction’s, where its writes would commit apart from the request or be lost, so ' +
            'they were refused; the request rolled back and nothing was committed or stored. Set ' +
            'the session inside the handler with SET LOCAL or set_config(…, true), or connect ' +
            'the runner inside the handler.'),
    );
    this.name = 'IdempotencyRunnerConnectedOutsideRequestError';
  }
}

/**
 * The handler's response outgrew the route's `maxResponseBytes`: it cannot be stored whole, so
 * the request's transaction rolled back, and this error's 500 is the key's stored answer.
 * Raise the bound for the route, return less, or serve large bodies from a route that is not
 * idempotent.
 */
export class IdempotencyResponseTooLargeError extends IdempotencyError {
  readonly code = 'response_too_large';
  constructor(readonly maxBytes: number) {
    super(
      `The response is larger than this route's maxResponseBytes (${maxBytes} bytes): it cannot ` +
        'be stored for replays, so nothing of the request was committed.',
    );
    this.name = 'IdempotencyResponseTooLargeError';
  }
}

/**
 * A stored response that is sealed (encryption at rest) could not be opened: its key is not
 * configured, or it does not authenticate (altered, or copied from another key). The replay is
 * a 500 that says which, never a wrong body.
 */
export class IdempotencyStoredResponseUnreadableError extends IdempotencyError {
  readonly code = 'stored_response_unreadable';
  constructor(readonly reason: string) {
    super(`The stored response of this idempotency key cannot be read: ${reason}.`);
    this.name = 'IdempotencyStoredResponseUnreadableError';
  }
}

function capitalized(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
