import { DatabaseError } from 'pg';
import { QueryFailedError } from 'typeorm';
import {
  asDatabaseFailure,
  markDatabaseFailure,
  DatabaseConnectionError,
  DatabaseDeadlineError,
  isConnectionError,
  isPermanentError,
  isReadOnlyError,
  isTransactionAbortedError,
  isTransientError,
} from './connection-errors.js';

/** PostgreSQL's own answer, as node-postgres' parser builds it. */
const server = (code: string) =>
  Object.assign(new DatabaseError(`pg ${code}`, 0, 'error'), { severity: 'ERROR', code });
/** A socket's error, as node raises it for a database connection and an HTTP call alike. */
const socket = (code: string) =>
  Object.assign(new Error(`read ${code}`), { code, errno: -104, syscall: 'read' });
/** TypeORM's wrapper of whatever the driver raised under a statement. */
const typeorm = (driverError: Error) => new QueryFailedError('SELECT 1', [], driverError);
/** node-postgres' and pg-pool's own errors, by their messages. */
const driver = (message: string) => new Error(message);

describe('isConnectionError: the database could not be reached (its errors only)', () => {
  it.each<[string, unknown, boolean]>([
    ['SQLSTATE 08006 connection failure', server('08006'), true],
    ['admin shutdown 57P01', server('57P01'), true],
    ['too many connections 53300', server('53300'), true],
    ['read-only session 25006 (a demoted primary)', typeorm(server('25006')), true],
    ['wrapped by TypeORM', typeorm(server('08001')), true],
    ['a socket reset under a statement (TypeORM)', typeorm(socket('ECONNRESET')), true],
    ['a socket reset under the library’s own call', asDatabaseFailure(socket('ECONNRESET')), true],
    ['connection refused to the library', asDatabaseFailure(socket('ECONNREFUSED')), true],
    ['the module’s deadline', new DatabaseDeadlineError('COMMIT', 5), true],
    ['the deadline under a statement', typeorm(new DatabaseDeadlineError('BEGIN', 5)), true],
    ['pg pool timeout', driver('timeout exceeded when trying to connect'), true],
    ['pg new client timeout', driver('Connection terminated due to connection timeout'), true],
    ['pg terminated', driver('Connection terminated unexpectedly'), true],
    [
      'pg not queryable',
      driver('Client has encountered a connection error and is not queryable'),
      true,
    ],
    ["pg's query_timeout", driver('Query read timeout'), true],
    ["pg's query_timeout under a statement", typeorm(driver('Query read timeout')), true],
    [
      'a refused connection marked by who knew it was PostgreSQL’s',
      markDatabaseFailure(socket('ECONNREFUSED')),
      true,
    ],
    // Marked by the library's connection as it broke (deadline.ts), then handed on as it is
    // by a data layer (Prisma's adapter converts only four socket codes; Kysely none).
    ['EPIPE on the library’s connection', markDatabaseFailure(socket('EPIPE')), true],
    ['ECONNABORTED on it', markDatabaseFailure(socket('ECONNABORTED')), true],
    ['ENETUNREACH on it', markDatabaseFailure(socket('ENETUNREACH')), true],
    ['ENOTCONN on it', markDatabaseFailure(socket('ENOTCONN')), true],
    ['a name server not answering for it', markDatabaseFailure(socket('EAI_AGAIN')), true],
    ['its host name not found', markDatabaseFailure(socket('ENOTFOUND')), true],
    ['its Unix socket gone', markDatabaseFailure(socket('ENOENT')), true],
    ['an HTTP client’s ENOTFOUND', socket('ENOTFOUND'), false],
    // 08P01 ERROR: one message refused on a live connection (over 65,535 parameters).
    ['a protocol violation of one statement', typeorm(server('08P01')), false],
    [
      'a protocol violation that ended the connection',
      Object.assign(server('08P01'), { severity: 'FATAL' }),
      true,
    ],
    // A call once the app began to stop: the pool or the data layer ended under it.
    ['pg-pool ended', driver('Cannot use a pool after calling end on the pool'), true],
    ['Kysely destroyed', driver('driver has already been destroyed'), true],
    [
      'TypeORM destroyed',
      Object.assign(new Error('Driver not Connected'), { name: 'TypeORMError' }),
      true,
    ],
    ['an HTTP client’s ENETUNREACH', socket('ENETUNREACH'), false],
    ['an HTTP client’s ECONNRESET', socket('ECONNRESET'), false],
    ['an HTTP client’s ECONNREFUSED', socket('ECONNREFUSED'), false],
    ['an HTTP client’s EPIPE', socket('EPIPE'), false],
    [
      'an HTTP client’s ETIMEDOUT',
      Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' }),
      false,
    ],
    [
      'an axios-like error with a code',
      Object.assign(new Error('x'), { code: 'ECONNRESET', isAxiosError: true }),
      false,
    ],
    [
      'a SQLSTATE-like code not from the server',
      Object.assign(new Error('x'), { code: '08006' }),
      false,
    ],
    [
      'a message that merely contains pg’s',
      driver('upstream: Connection terminated unexpectedly'),
      false,
    ],
    ['unique violation 23505', server('23505'), false],
    ['syntax error 42601', typeorm(server('42601')), false],
    ['deadlock 40P01 (transient, not a connection error)', server('40P01'), false],
    ['plain error', new Error('boom'), false],
    ['not an object', 'boom', false],
    ['a plain object with a code', { code: 'ECONNRESET', message: 'x' }, false],
    ['undefined', undefined, false],
  ])('%s -> %s', (_name, error, expected) => {
    expect(isConnectionError(error)).toBe(expected);
  });
});

describe('isTransientError', () => {
  it.each<[string, unknown, boolean]>([
    ['serialization failure 40001', server('40001'), true],
    ['deadlock 40P01', server('40P01'), true],
    ['statement completion unknown 40003', server('40003'), true],
    ['statement timeout 57014', server('57014'), true],
    [
      'a cancel 57014 "due to user request" (anyone\'s pg_cancel_backend: passing)',
      Object.assign(server('57014'), { message: 'canceling statement due to user request' }),
      true,
    ],
    ['lock timeout 55P03', server('55P03'), true],
    ['deadlock wrapped by TypeORM', typeorm(server('40P01')), true],
    ['a code 40001 not from the server', Object.assign(new Error('x'), { code: '40001' }), false],
    ['unique violation 23505', server('23505'), false],
    ['admin shutdown 57P01 (a connection error)', server('57P01'), false],
    ["pg's query_timeout (a connection error)", driver('Query read timeout'), false],
    ['transaction aborted 25P02', server('25P02'), false],
    ['a NUL 22021 (permanent, never passing)', server('22021'), false],
    ['an untranslatable character 22P05 (permanent)', server('22P05'), false],
    ['no code', new Error('boom'), false],
    ['undefined', undefined, false],
  ])('%s -> %s', (_name, error, expected) => {
    expect(isTransientError(error)).toBe(expected);
  });
});

describe('isPermanentError: refusals no retry passes until the database is fixed', () => {
  it.each<[string, unknown, boolean]>([
    ['undefined table 42P01', typeorm(server('42P01')), true],
    ['undefined column 42703', server('42703'), true],
    ['undefined function 42883', server('42883'), true],
    ['insufficient privilege 42501', typeorm(server('42501')), true],
    ['a NUL in a text the library sent 22021', server('22021'), true],
    ['a NUL wrapped by TypeORM 22021', typeorm(server('22021')), true],
    ['an untranslatable character 22P05', server('22P05'), true],
    ['a 22021 not from the server', Object.assign(new Error('x'), { code: '22021' }), false],
    ['invalid text representation 22P02', server('22P02'), false],
    ['read-only 25006 (decided by the session, not the code)', server('25006'), false],
    ['deadlock 40P01', server('40P01'), false],
    ['unique violation 23505', server('23505'), false],
    ['an HTTP client’s error with a code', Object.assign(new Error('x'), { code: '42P01' }), false],
    ['undefined', undefined, false],
  ])('%s -> %s', (_name, error, expected) => {
    expect(isPermanentError(error)).toBe(expected);
  });

  it.each<[string, unknown, boolean]>([
    ['25006', server('25006'), true],
    ['25006 wrapped by TypeORM', typeorm(server('25006')), true],
    ['25P02', server('25P02'), false],
  ])('isReadOnlyError: %s -> %s', (_name, error, expected) => {
    expect(isReadOnlyError(error)).toBe(expected);
  });
});

describe('isTransactionAbortedError', () => {
  it.each<[string, unknown, boolean]>([
    ['25P02', server('25P02'), true],
    ['25P02 wrapped by TypeORM', typeorm(server('25P02')), true],
    ['23505', server('23505'), false],
    ['undefined', undefined, false],
  ])('%s -> %s', (_name, error, expected) => {
    expect(isTransactionAbortedError(error)).toBe(expected);
  });
});

it('markDatabaseFailure hands the error back as it is', () => {
  const error = socket('ECONNREFUSED');
  expect(markDatabaseFailure(error)).toBe(error);
  expect(markDatabaseFailure('not an error')).toBe('not an error');
});

describe('asDatabaseFailure: what the library passes on from its own calls to PostgreSQL', () => {
  it.each<[string, Error, string]>([
    ['a socket error is marked', socket('ECONNRESET'), 'DatabaseConnectionError'],
    ['a server error stays itself (the fence reads its SQLSTATE)', server('22012'), 'error'],
    ["pg's own error stays itself", driver('Query read timeout'), 'Error'],
    ['the deadline stays itself', new DatabaseDeadlineError('x', 1), 'DatabaseDeadlineError'],
  ])('%s', (_name, error, name) => {
    const passed = asDatabaseFailure(error) as Error;
    expect(passed.name).toBe(name);
    if (passed instanceof DatabaseConnectionError) expect(passed.cause).toBe(error);
    else expect(passed).toBe(error);
  });
});
