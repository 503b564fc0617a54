import { PrismaPg } from '@prisma/adapter-pg';
import {
  PrismaClientKnownRequestError,
  PrismaClientValidationError,
} from '@prisma/client/runtime/client';
import { DatabaseError, Pool } from 'pg';
import { prismaCause } from './prisma.js';

/**
 * The errors come from the real `@prisma/adapter-pg`: its pool's `query` is made to fail with
 * what node-postgres raises (a server's `DatabaseError`, a socket's error), and the adapter
 * turns that into its `DriverAdapterError` as it does on a live connection. The client's
 * wrapper is built as the client builds it (the fields seen on errors captured from Prisma 7.10
 * on PostgreSQL 15: P2002 for 23505, P2034 for 40001/40P01, P2010 for a raw query's failure).
 */
async function adapterError(raised: Error): Promise<Error> {
  const pool = new Pool();
  pool.query = (() => Promise.reject(raised)) as unknown as Pool['query'];
  const adapter = await new PrismaPg(pool).connect();
  try {
    await adapter.queryRaw({ sql: 'SELECT 1', args: [], argTypes: [] });
  } catch (error) {
    return error as Error;
  } finally {
    await pool.end();
  }
  throw new Error('the adapter did not fail');
}

/** PostgreSQL's own answer, as node-postgres' parser builds it. */
const server = (code: string, message: string, severity = 'ERROR') =>
  Object.assign(new DatabaseError(message, 0, 'error'), { severity, code });
/** A socket's error, as node raises it. */
const socket = (code: string) =>
  Object.assign(new Error(`read ${code}`), { code, errno: -104, syscall: 'read' });

/** The client's wrapper of an adapter's error under a model query. */
const known = (code: string, driverAdapterError: Error) =>
  new PrismaClientKnownRequestError(`Invalid \`prisma.order.create()\` invocation`, {
    code,
    clientVersion: '7.10.1',
    meta: { modelName: 'Order', driverAdapterError },
  });

describe('prismaCause: the database failure inside a Prisma 7 error', () => {
  it.each<[string, () => Promise<unknown>, object | undefined]>([
    [
      'a unique violation (P2002)',
      async () => known('P2002', await adapterError(server('23505', 'duplicate key value'))),
      { code: '23505', severity: 'ERROR', message: 'duplicate key value' },
    ],
    [
      'a serialization failure (P2034)',
      async () => known('P2034', await adapterError(server('40001', 'could not serialize access'))),
      { code: '40001', severity: 'ERROR' },
    ],
    [
      'a deadlock (P2034)',
      async () => known('P2034', await adapterError(server('40P01', 'deadlock detected'))),
      { code: '40P01' },
    ],
    [
      'a statement timeout under a raw query (P2010)',
      async () =>
        known('P2010', await adapterError(server('57014', 'canceling statement due to timeout'))),
      { code: '57014', message: 'canceling statement due to timeout' },
    ],
    [
      'a lock timeout',
      async () => known('P2010', await adapterError(server('55P03', 'lock timeout'))),
      { code: '55P03' },
    ],
    [
      'a terminated backend (57P01, FATAL)',
      async () =>
        known('P2010', await adapterError(server('57P01', 'terminating connection', 'FATAL'))),
      { code: '57P01', severity: 'FATAL', message: 'terminating connection' },
    ],
    [
      'the adapter’s own error, as a transaction’s start throws it (too many connections)',
      // The adapter names 53300 (TooManyConnections) and keeps no severity for named kinds.
      () => adapterError(server('53300', 'too many clients', 'FATAL')),
      { code: '53300', severity: 'ERROR', message: 'too many clients' },
    ],
    [
      'a reset socket (the adapter keeps only ConnectionClosed)',
      async () => known('P1017', await adapterError(socket('ECONNRESET'))),
      { code: 'ECONNRESET', severity: undefined },
    ],
    [
      'a refused connection (DatabaseNotReachable)',
      async () => known('P1001', await adapterError(socket('ECONNREFUSED'))),
      { code: 'ECONNREFUSED' },
    ],
    [
      'a socket timeout',
      async () => known('P1008', await adapterError(socket('ETIMEDOUT'))),
      { code: 'ETIMEDOUT' },
    ],
    [
      'an expired interactive transaction (P2028): Prisma’s own, not the database’s',
      () =>
        Promise.resolve(
          new PrismaClientKnownRequestError('Transaction API error', {
            code: 'P2028',
            clientVersion: '7.10.1',
            meta: { modelName: 'Order', operation: 'query', timeout: 5000, timeTaken: 5012 },
          }),
        ),
      undefined,
    ],
    [
      'a validation error of the client',
      () =>
        Promise.resolve(
          new PrismaClientValidationError('Argument `quantity` is missing.', {
            clientVersion: '7.10.1',
          }),
        ),
      undefined,
    ],
    [
      'node-postgres’ own error, which Prisma passes through unwrapped',
      () =>
        Promise.resolve(
          new Error('Client has encountered a connection error and is not queryable'),
        ),
      undefined,
    ],
    ['a socket error of an HTTP call', () => Promise.resolve(socket('ECONNRESET')), undefined],
    ['not an error', () => Promise.resolve('P2002'), undefined],
  ])('%s', async (_name, make, expected) => {
    const cause = prismaCause(await make());
    if (expected === undefined) expect(cause).toBeUndefined();
    else expect(cause).toMatchObject(expected);
  });

  it('a server error comes back with the shape of node-postgres’ (a severity and a SQLSTATE)', async () => {
    const cause = prismaCause(known('P2034', await adapterError(server('40001', 'x')))) as Error;
    expect(cause).toBeInstanceOf(Error);
    expect(cause).toMatchObject({ name: 'PrismaDriverFailure', code: '40001', severity: 'ERROR' });
  });
});
