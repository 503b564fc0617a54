/** SQLSTATEs that say the database, not the statement, failed: class 08 and shutdowns. */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300']);
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH']);

/**
 * Whether an error means "the database could not be reached" rather than "this statement is
 * wrong". The first kind must not become a stored 500: nothing about the request is final,
 * and a retry once the database is back resumes where the work stopped.
 */
export function isConnectionError(error: unknown): boolean {
  const candidates = [error, (error as { driverError?: unknown } | undefined)?.driverError];
  for (const candidate of candidates) {
    if (!candidate || typeof candidate !== 'object') continue;
    const code = (candidate as { code?: unknown }).code;
    if (typeof code === 'string') {
      if (code.startsWith('08') || UNAVAILABLE_STATES.has(code) || NETWORK_CODES.has(code)) {
        return true;
      }
    }
    const message = (candidate as { message?: unknown }).message;
    if (
      typeof message === 'string' &&
      /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(
        message,
      )
    ) {
      return true;
    }
  }
  return false;
}
