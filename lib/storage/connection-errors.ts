/**
 * SQLSTATEs that say the database, not the statement, failed: class 08, shutdowns, too many
 * connections, and `25006` (a write on a read-only session: a primary that was demoted in a
 * failover).
 */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300', '25006']);
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH']);
/**
 * SQLSTATEs of a statement that failed for a passing reason and may succeed as it is when
 * run again: class 40 (serialization failure, deadlock), `57014` (statement timeout or
 * cancel) and `55P03` (lock timeout, `NOWAIT`).
 */
const TRANSIENT_STATES = new Set(['57014', '55P03']);

/** The SQLSTATE or network code of an error, or of the driver error TypeORM wrapped. */
function codesOf(error: unknown): { code?: string; message?: string }[] {
  const candidates = [error, (error as { driverError?: unknown } | undefined)?.driverError];
  const out: { code?: string; message?: string }[] = [];
  for (const candidate of candidates) {
    if (!candidate || typeof candidate !== 'object') continue;
    const { code, message } = candidate as { code?: unknown; message?: unknown };
    out.push({
      code: typeof code === 'string' ? code : undefined,
      message: typeof message === 'string' ? message : undefined,
    });
  }
  return out;
}

/**
 * Whether an error means "the database could not be reached" rather than "this statement is
 * wrong". The first kind must not become a stored 500: nothing about the request is final,
 * and a retry once the database is back resumes where the work stopped.
 */
export function isConnectionError(error: unknown): boolean {
  return codesOf(error).some(
    ({ code, message }) =>
      (code !== undefined &&
        (code.startsWith('08') || UNAVAILABLE_STATES.has(code) || NETWORK_CODES.has(code))) ||
      (message !== undefined &&
        /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(
          message,
        )),
  );
}

/**
 * Whether the database aborted a statement for a passing reason (a deadlock, a serialization
 * failure, a statement or lock timeout). Its transaction rolled back, so nothing of it is
 * final either: a retry runs it again, and a stored 500 would be a lie for the whole
 * retention window.
 */
export function isTransientError(error: unknown): boolean {
  return codesOf(error).some(
    ({ code }) => code !== undefined && (code.startsWith('40') || TRANSIENT_STATES.has(code)),
  );
}

/** SQLSTATE 25P02: a statement of the transaction failed before, so it can only roll back. */
export function isTransactionAbortedError(error: unknown): boolean {
  return codesOf(error).some(({ code }) => code === '25P02');
}
