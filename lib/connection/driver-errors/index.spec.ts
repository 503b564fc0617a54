import { DatabaseError } from 'pg';
import { isConnectionError, isPermanentError, isTransientError } from '../connection-errors.js';

/** PostgreSQL's own answer, as node-postgres' parser builds it. */
const server = (code: string) =>
  Object.assign(new DatabaseError(`error ${code}`, 0, 'error'), { severity: 'ERROR', code });
/** Drizzle's `DrizzleQueryError` around it, as its session throws it. */
const drizzle = (cause: unknown) =>
  Object.assign(new Error('Failed query: insert into "orders" values ($1)\nparams: 1'), {
    query: 'insert into "orders" values ($1)',
    params: [1],
    cause,
  });
/** Prisma's client error around its adapter's description of the driver's error. */
const prisma = (cause: object) =>
  Object.assign(new Error('Invalid `prisma.order.create()` invocation'), {
    name: 'PrismaClientKnownRequestError',
    code: 'P2034',
    meta: {
      driverAdapterError: Object.assign(new Error('adapter'), {
        name: 'DriverAdapterError',
        cause,
      }),
    },
  });

/** The library's classification sees through each data layer's wrapper. */
describe('a data layer’s wrapped database failure', () => {
  it.each<[string, unknown, 'transient' | 'connection' | 'permanent' | 'none']>([
    ['Drizzle, a serialization failure', drizzle(server('40001')), 'transient'],
    ['Drizzle, a deadlock', drizzle(server('40P01')), 'transient'],
    ['Drizzle, the server shutting down', drizzle(server('57P01')), 'connection'],
    ['Drizzle, a missing table', drizzle(server('42P01')), 'permanent'],
    ['Drizzle, a unique violation (the handler’s)', drizzle(server('23505')), 'none'],
    [
      'Prisma, a serialization failure',
      prisma({ kind: 'postgres', originalCode: '40001', originalMessage: 'could not serialize' }),
      'transient',
    ],
    ['Prisma, a connection closed', prisma({ kind: 'ConnectionClosed' }), 'connection'],
    [
      'Prisma, a unique violation (the handler’s)',
      prisma({ kind: 'UniqueConstraintViolation', originalCode: '23505', originalMessage: 'dup' }),
      'none',
    ],
    [
      'a plain error with a cause (not a data layer’s)',
      new Error('x', { cause: server('40001') }),
      'none',
    ],
  ])('%s', (_name, error, expected) => {
    const kind = isTransientError(error)
      ? 'transient'
      : isConnectionError(error)
        ? 'connection'
        : isPermanentError(error)
          ? 'permanent'
          : 'none';
    expect(kind).toBe(expected);
  });
});
