import { DrizzleError, DrizzleQueryError, TransactionRollbackError } from 'drizzle-orm/errors';
import { DatabaseError } from 'pg';
import { QueryFailedError } from 'typeorm';
import { drizzleCause } from './drizzle.js';

/**
 * The errors as Drizzle's node-postgres driver raises them: its own DrizzleQueryError around
 * node-postgres' DatabaseError (built as pg's parser builds it, with what PostgreSQL sent), a
 * socket's error, or pg's and pg-pool's own errors. test/long/examples/drizzle-orders.e2e-spec.ts
 * checks the same function on errors captured from a real database.
 */
const server = (code: string, message: string) =>
  Object.assign(new DatabaseError(message, 100, 'error'), { severity: 'ERROR', code });
const socket = (code: string) =>
  Object.assign(new Error(`read ${code}`), { code, errno: -104, syscall: 'read' });
const INSERT = 'insert into "orders" ("id", "sku") values (default, $1) returning "id"';
const drizzle = (cause: unknown) => new DrizzleQueryError(INSERT, ['sku-1'], cause as Error);

const uniqueViolation = server('23505', 'duplicate key value violates unique constraint "x"');
const serialization = server('40001', 'could not serialize access');
const terminated = server('57P01', 'terminating connection due to administrator command');
const reset = socket('ECONNRESET');
const ended = new Error('Connection terminated unexpectedly');
const notQueryable = new Error('Client has encountered a connection error and is not queryable');

describe('drizzleCause: the driver error inside Drizzle’s wrapper', () => {
  it.each<[string, unknown, unknown]>([
    ['a unique violation (23505)', drizzle(uniqueViolation), uniqueViolation],
    ['a serialization failure (40001)', drizzle(serialization), serialization],
    ['a terminated backend (57P01)', drizzle(terminated), terminated],
    ['a socket reset under the statement', drizzle(reset), reset],
    ['pg’s connection terminated', drizzle(ended), ended],
    ['pg’s client no longer queryable', drizzle(notQueryable), notQueryable],
    ['node-postgres’ error, not wrapped', uniqueViolation, undefined],
    ['a socket error, not wrapped', reset, undefined],
    ['TypeORM’s QueryFailedError', new QueryFailedError(INSERT, [], uniqueViolation), undefined],
    ['Drizzle’s tx.rollback()', new TransactionRollbackError(), undefined],
    ['another DrizzleError', new DrizzleError({ message: 'x', cause: reset }), undefined],
    ['an Error with a cause', new Error('x', { cause: uniqueViolation }), undefined],
    [
      'a lookalike without Drizzle’s message',
      Object.assign(new Error('boom'), { query: INSERT, params: [], cause: reset }),
      undefined,
    ],
    ['null', null, undefined],
    ['a string', 'Failed query: select 1', undefined],
  ])('%s', (_name, error, cause) => {
    expect(drizzleCause(error)).toBe(cause);
  });
});
