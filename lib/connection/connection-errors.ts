import { dataLayerCause } from './driver-errors/index.js';
import { isEndedDataLayer } from './driver-errors/ended.js';

/**
 * Which failures came from the database, and what they mean. Only an error that came from
 * PostgreSQL's driver counts: a network code such as `ECONNRESET` also ends a handler's own
 * HTTP call to another system, and that failure is the handler's answer to store, not a
 * database outage to retry (a retry would call that system again, which is only safe when
 * the call carries a derived key). An error is the database's when it is, structurally:
 * - a server error of node-postgres (`DatabaseError`: a `severity` and a SQLSTATE `code`);
 * - one of node-postgres' or pg-pool's own errors, by its exact message;
 * - TypeORM's `QueryFailedError`, which wraps whatever the driver raised under a statement,
 *   and Drizzle's, Prisma's and Kysely's wrappers likewise (`driver-errors/`);
 * - a data layer's own error for a call once its pool or driver was ended (`driver-errors/`);
 * - an error the library's own connection emitted as it broke (`deadline.ts` marks it), or
 *   one of the errors below, raised where the library itself waited on PostgreSQL.
 */

/** Thrown when a store's server (PostgreSQL, Redis) did not answer within its time limit. */
export class DatabaseDeadlineError extends Error {
  constructor(what: string, timeoutMs: number, server = 'PostgreSQL') {
    super(`${what}: no answer from ${server} within ${timeoutMs} ms`);
    this.name = 'DatabaseDeadlineError';
  }
}

/**
 * The socket of a connection to PostgreSQL failed (`ECONNRESET`, `ECONNREFUSED`, ...) under a
 * call the library made itself: node-postgres hands such errors on as the socket raised them,
 * indistinguishable from an HTTP client's, so they are marked where their origin is known.
 */
export class DatabaseConnectionError extends Error {
  constructor(override readonly cause: unknown) {
    super(`the connection to PostgreSQL failed: ${String(cause)}`);
    this.name = 'DatabaseConnectionError';
  }
}

/**
 * `error` as the library passes it on from its own call to PostgreSQL: a socket's error
 * (a `code` but no SQLSTATE severity) marked as the database's, anything else as it is.
 */
export function asDatabaseFailure(error: unknown): unknown {
  if (!isError(error) || isServerError(error)) return error;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' ? new DatabaseConnectionError(error) : error;
}

/**
 * An error, checked by its shape: node's socket errors come from another realm than code run
 * in a VM context (jest), where `instanceof Error` is false for them.
 */
function isError(error: unknown): error is Error {
  return (
    typeof error === 'object' &&
    error !== null &&
    typeof (error as { message?: unknown }).message === 'string'
  );
}

/** Errors that callers who knew where they came from marked as PostgreSQL's (below). */
const markedFromDatabase = new WeakSet<object>();

/**
 * Marks `error` as raised by a connection to PostgreSQL, and returns it as it is (the app that
 * catches it sees the driver's own error): for a caller that knows where it came from, when
 * the error cannot say it (a pool's refused connection reached through TypeORM's own
 * `connect()`, which hands the socket's error on unwrapped).
 */
export function markDatabaseFailure<T>(error: T): T {
  if (isError(error)) markedFromDatabase.add(error);
  return error;
}

const markedReadOnlyByHandler = new WeakSet<object>();

/**
 * Marks a 25006 as met inside a transaction the handler itself made read only (a nested
 * `BEGIN READ ONLY`), and returns it as it is: its own write refused, as without the library,
 * never the sign of a demoted primary (see `UNAVAILABLE_STATES`).
 */
export function markReadOnlyByHandler<T>(error: T): T {
  if (isError(error)) markedReadOnlyByHandler.add(error);
  return error;
}

/**
 * SQLSTATEs that say the database, not the statement, failed: class 08, shutdowns, too many
 * connections, and `25006` (a write on a read-only session: a primary that was demoted in a
 * failover).
 */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300', '25006']);
/**
 * A socket's failures: the connection was refused, reset, cut while writing, timed out, or the
 * network or the name server did not answer. Only read on errors known to be the database's.
 */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTCONN',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'EAI_AGAIN',
  // The host's name not found (a DNS record gone during a failover), or a Unix socket's file
  // gone while the server restarts: on a connection known to be the database's, an outage.
  'ENOTFOUND',
  'ENOENT',
]);
/**
 * node-postgres' and pg-pool's own errors that end a connection or a wait for one. `Query read
 * timeout` is `query_timeout`: the client stopped waiting while the statement may still run
 * (its outcome is unknown, as at the module's own deadline), so it is one of these.
 */
const DRIVER_CONNECTION_MESSAGES = new Set([
  'Connection terminated unexpectedly',
  'Connection terminated',
  'Connection terminated due to connection timeout',
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
  'timeout exceeded when trying to connect',
  'Query read timeout',
  // pg-pool's, for a call once the app began to stop (its pool ended under a request still
  // running): nothing of the request is final, and another instance answers its retry.
  'Cannot use a pool after calling end on the pool',
]);
/**
 * SQLSTATEs of a statement that failed for a passing reason and may succeed as it is when
 * run again: class 40 (serialization failure, deadlock), `57014` (statement timeout or
 * cancel) and `55P03` (lock timeout, `NOWAIT`).
 */
const TRANSIENT_STATES = new Set(['57014', '55P03']);

/** What the driver reported, when `error` came from the database; undefined otherwise. */
type DriverFailure =
  | { kind: 'unreachable' }
  | { kind: 'driver'; code: string | undefined; message: string; severity?: string };

function fromDatabase(error: unknown, underStatement = false): DriverFailure | undefined {
  if (!isError(error)) return undefined;
  if (
    error instanceof DatabaseDeadlineError ||
    error instanceof DatabaseConnectionError ||
    isEndedDataLayer(error)
  ) {
    return { kind: 'unreachable' };
  }
  const { driverError, query } = error as { driverError?: unknown; query?: unknown };
  // TypeORM's QueryFailedError: whatever the driver raised under the statement.
  if (driverError !== undefined && typeof query === 'string') {
    return fromDatabase(driverError, true);
  }
  // Drizzle's, Prisma's and Kysely's wrappers: the same, read by their shape.
  const wrapped = dataLayerCause(error);
  if (wrapped !== undefined && wrapped !== error) return fromDatabase(wrapped, true);
  if (
    underStatement ||
    markedFromDatabase.has(error) ||
    isServerError(error) ||
    DRIVER_CONNECTION_MESSAGES.has(error.message)
  ) {
    const { code, severity } = error as { code?: unknown; severity?: unknown };
    return {
      kind: 'driver',
      code: typeof code === 'string' ? code : undefined,
      message: error.message,
      severity: typeof severity === 'string' ? severity : undefined,
    };
  }
  return undefined;
}

/** node-postgres' `DatabaseError`: PostgreSQL's own answer, with a severity and a SQLSTATE. */
/** An error the server answered (an `ErrorResponse`, with its severity and SQLSTATE). */
export function isServerError(error: Error): boolean {
  const { severity, code } = error as { severity?: unknown; code?: unknown };
  return typeof severity === 'string' && typeof code === 'string';
}

/**
 * Whether an error means "the database could not be reached" rather than "this statement is
 * wrong". The first kind must not become a stored 500: nothing about the request is final,
 * and a retry once the database is back resumes where the work stopped.
 */
export function isConnectionError(error: unknown): boolean {
  const failure = fromDatabase(error);
  if (!failure) return false;
  if (failure.kind === 'unreachable') return true;
  const { code, message, severity } = failure;
  if (code === '25006' && isError(error) && markedReadOnlyByHandler.has(error)) return false;
  return (
    (code !== undefined &&
      ((code.startsWith('08') && !isStatementsProtocolViolation(code, severity)) ||
        UNAVAILABLE_STATES.has(code) ||
        NETWORK_CODES.has(code))) ||
    DRIVER_CONNECTION_MESSAGES.has(message)
  );
}

/**
 * `08P01` (protocol violation) with severity ERROR is PostgreSQL refusing one message on a
 * connection that stays open: a statement with more than 65,535 parameters, which node-postgres'
 * Bind cannot count. Every retry meets it again, so it is the handler's final answer, not an
 * outage (a 503 would run the handler's other effects again on every retry, and a consumer
 * would redeliver the message for ever). Sent FATAL, the connection ended: an outage.
 */
function isStatementsProtocolViolation(code: string, severity: string | undefined): boolean {
  return code === '08P01' && severity !== undefined && severity !== 'FATAL';
}

/**
 * Whether the database aborted a statement for a passing reason (a deadlock, a serialization
 * failure, a statement or lock timeout). Its transaction rolled back, so nothing of it is
 * final either: a retry runs it again, and a stored 500 would be a lie for the whole
 * retention window.
 */
export function isTransientError(error: unknown): boolean {
  const failure = fromDatabase(error);
  if (failure?.kind !== 'driver' || failure.code === undefined) return false;
  return failure.code.startsWith('40') || TRANSIENT_STATES.has(failure.code);
}

/** What the app asked PostgreSQL to do to a backend: cancel its statement, or end it. */
export type CancelKind = 'cancel' | 'terminate';

/**
 * Whether `error`, met on a connection whose backend the request's own code asked PostgreSQL
 * to cancel or end (`kind`), is what that asked for:
 * - `cancel` (`pg_cancel_backend`): a 57014 that is not a statement or lock timeout's, told
 *   by PostgreSQL's English message ("canceling statement due to statement timeout"); under
 *   another `lc_messages` a 57014 met after the app's own cancel is taken as its answer (a
 *   timeout landing in the same moment would be taken so too: rarer than a translated server);
 * - `terminate` (`pg_terminate_backend`): the connection's loss, whatever form it reaches the
 *   driver in (57P01, the socket's end, a client no longer queryable).
 * A cancel carries nothing that says who sent it: an operator's `pg_cancel_backend`, a
 * pooler's `query_timeout` or a server's shutdown give the same errors, so the errors are
 * told apart by what the app's own code asked for (`cancel-asked.ts`), never by their text.
 */
export function answersAsked(kind: CancelKind, error: unknown): boolean {
  if (kind === 'terminate') return isConnectionError(error);
  const failure = fromDatabase(error);
  return (
    failure?.kind === 'driver' &&
    failure.code === '57014' &&
    !/due to (statement|lock) timeout/.test(failure.message)
  );
}

/** Errors that answer a cancel or an end the request's own code asked for (see above). */
const askedByApp = new WeakSet<object>();

/**
 * Marks `error` as the answer to a cancel or an end of the request's connection that the
 * request's own code asked for (Kysely's `'cancel query'` or `'kill session'` abort), and
 * returns it as it is.
 */
export function markAskedByApp<T>(error: T): T {
  if (isError(error)) askedByApp.add(error);
  return error;
}

/**
 * Whether `error` (or the driver's error a data layer wrapped in it) answers a cancel or an
 * end of the request's connection that the request's own code asked for: that ended the
 * request's transaction, and its retry asks for the same. No passing failure: a 503 would be
 * answered for ever. Someone else's cancel or end (an operator, a pooler, a shutdown) is not
 * marked, and is the passing failure it looks like.
 */
export function isCancelAskedForError(error: unknown, depth = 0): boolean {
  if (!isError(error) || depth > 4) return false;
  if (askedByApp.has(error)) return true;
  const inner =
    error instanceof DatabaseConnectionError
      ? error.cause
      : ((error as { driverError?: unknown }).driverError ?? dataLayerCause(error));
  return inner !== undefined && inner !== error && isCancelAskedForError(inner, depth + 1);
}

/**
 * Whether the database rolled a statement back (class 40: a serialization failure, a
 * deadlock): in autocommit nothing of it happened, so a fenced statement may run again.
 */
export function isRolledBackError(error: unknown): boolean {
  return codeFromDatabase(error)?.startsWith('40') ?? false;
}

/**
 * SQLSTATEs of a statement that no retry will make pass until someone changes the database:
 * `42P01` undefined table, `42703` undefined column, `42883` undefined function (the library's
 * migrations did not run, or not all of them) and `42501` insufficient privilege (the app's
 * role was not granted the library's tables); and, the statements being the library's own,
 * `23502` not-null violation (a DEFAULT its inserts rely on was dropped) and `42P10` (the
 * primary key its ON CONFLICT names was dropped), `22021` (character_not_in_repertoire: a NUL,
 * or bytes not UTF-8) and `22P05` (untranslatable_character: a `\u0000` in JSON, a character
 * the server's encoding lacks) in a text the library sent (a tenant, a key, an owner): the
 * same statement fails so on every run, never "retry later" (adversary 99: a job delayed for
 * ever). A read-only session (`25006`) is not one of them by its code alone: see
 * `read-only-session.ts`.
 */
const PERMANENT_STATES = new Set([
  '42P01',
  '42703',
  '42883',
  '42501',
  '23502',
  '42P10',
  '22021',
  '22P05',
]);

/** Whether the database refused a statement for a reason that lasts (see above). */
export function isPermanentError(error: unknown): boolean {
  const code = codeFromDatabase(error);
  return code !== undefined && PERMANENT_STATES.has(code);
}

/** SQLSTATE 25006: a write in a read-only transaction. */
export function isReadOnlyError(error: unknown): boolean {
  return codeFromDatabase(error) === '25006';
}

/** SQLSTATE 25P02: a statement of the transaction failed before, so it can only roll back. */
export function isTransactionAbortedError(error: unknown): boolean {
  return codeFromDatabase(error) === '25P02';
}

function codeFromDatabase(error: unknown): string | undefined {
  const failure = fromDatabase(error);
  return failure?.kind === 'driver' ? failure.code : undefined;
}
