import { isConnectionError } from './connection-errors.js';

const withCode = (code: string) => Object.assign(new Error('x'), { code });

describe('isConnectionError', () => {
  it.each<[string, unknown, boolean]>([
    ['connection refused', withCode('ECONNREFUSED'), true],
    ['connection reset', withCode('ECONNRESET'), true],
    ['SQLSTATE 08006 connection failure', withCode('08006'), true],
    ['admin shutdown 57P01', withCode('57P01'), true],
    ['too many connections 53300', withCode('53300'), true],
    ['pg pool timeout', new Error('timeout exceeded when trying to connect'), true],
    ['pg terminated', new Error('Connection terminated unexpectedly'), true],
    ['wrapped by TypeORM', { message: 'query failed', driverError: withCode('08001') }, true],
    ['unique violation 23505', withCode('23505'), false],
    ['syntax error 42601', withCode('42601'), false],
    ['plain error', new Error('boom'), false],
    ['not an object', 'boom', false],
    ['undefined', undefined, false],
  ])('%s -> %s', (_name, error, expected) => {
    expect(isConnectionError(error)).toBe(expected);
  });
});
