import { AbortedTransactionError, NoResultError } from 'kysely';
import pg from 'pg';
import { kyselyCause } from './kysely.js';

/**
 * node-postgres' own errors, built with its class and the fields the real driver gave under
 * Kysely's PostgresDialect (captured from PostgreSQL 15: `SELECT 1/0`, a backend terminated
 * by pg_terminate_backend, a refused connection).
 */
function serverError(message: string, severity: string, code: string): Error {
  const error = new pg.DatabaseError(message, message.length, 'error');
  return Object.assign(error, { severity, code });
}
const divisionByZero = serverError('division by zero', 'ERROR', '22012');
const terminated = serverError(
  'terminating connection due to administrator command',
  'FATAL',
  '57P01',
);
const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), {
  errno: -111,
  code: 'ECONNREFUSED',
  syscall: 'connect',
});
const lostSocket = new Error('Connection terminated unexpectedly');

describe('kyselyCause', () => {
  it.each<[string, unknown, unknown]>([
    // Kysely's own wrapper: the driver's error is its cause (as its PGlite dialect raises it).
    [
      'AbortedTransactionError with a server error',
      new AbortedTransactionError({ cause: divisionByZero }),
      divisionByZero,
    ],
    [
      'AbortedTransactionError with a socket error',
      new AbortedTransactionError({ cause: refused }),
      refused,
    ],
    // The PostgresDialect's: COMMIT answered ROLLBACK; no driver error inside.
    ['AbortedTransactionError with no cause', new AbortedTransactionError(), undefined],
    // Passed through by Kysely as the driver raised them: not a wrapper, nothing inside.
    ['a DatabaseError passed through', divisionByZero, undefined],
    ['a FATAL 57P01 passed through', terminated, undefined],
    ['a refused connection passed through', refused, undefined],
    ['a lost socket passed through', lostSocket, undefined],
    // Kysely's errors that are not the database's.
    [
      'NoResultError',
      new NoResultError({ kind: 'SelectQueryNode', from: undefined } as never),
      undefined,
    ],
    ['a plain Error with a cause', new Error('app', { cause: divisionByZero }), undefined],
    ['null', null, undefined],
    ['a string', 'AbortedTransactionError', undefined],
  ])('%s', (_name, error, cause) => {
    expect(kyselyCause(error)).toBe(cause);
  });
});
