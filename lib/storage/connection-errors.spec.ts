import {
  isConnectionError,
  isTransactionAbortedError,
  isTransientError,
} from './connection-errors.js';

const withCode = (code: string) => Object.assign(new Error('x'), { code });
const wrapped = (code: string) => ({ message: 'query failed', driverError: withCode(code) });

describe('isConnectionError', () => {
  it.each<[string, unknown, boolean]>([
    ['connection refused', withCode('ECONNREFUSED'), true],
    ['connection reset', withCode('ECONNRESET'), true],
    ['SQLSTATE 08006 connection failure', withCode('08006'), true],
    ['admin shutdown 57P01', withCode('57P01'), true],
    ['too many connections 53300', withCode('53300'), true],
    ['read-only session 25006 (a demoted primary)', wrapped('25006'), true],
    ['pg pool timeout', new Error('timeout exceeded when trying to connect'), true],
    ['pg terminated', new Error('Connection terminated unexpectedly'), true],
    ['wrapped by TypeORM', wrapped('08001'), true],
    ['unique violation 23505', withCode('23505'), false],
    ['syntax error 42601', withCode('42601'), false],
    ['deadlock 40P01 (transient, not a connection error)', withCode('40P01'), false],
    ['plain error', new Error('boom'), false],
    ['not an object', 'boom', false],
    ['undefined', undefined, false],
  ])('%s -> %s', (_name, error, expected) => {
    expect(isConnectionError(error)).toBe(expected);
  });
});

describe('isTransientError', () => {
  it.each<[string, unknown, boolean]>([
    ['serialization failure 40001', withCode('40001'), true],
    ['deadlock 40P01', withCode('40P01'), true],
    ['statement completion unknown 40003', withCode('40003'), true],
    ['statement timeout 57014', withCode('57014'), true],
    ['lock timeout 55P03', withCode('55P03'), true],
    ['deadlock wrapped by TypeORM', wrapped('40P01'), true],
    ['unique violation 23505', withCode('23505'), false],
    ['admin shutdown 57P01 (a connection error)', withCode('57P01'), false],
    ['transaction aborted 25P02', withCode('25P02'), false],
    ['no code', new Error('boom'), false],
    ['undefined', undefined, false],
  ])('%s -> %s', (_name, error, expected) => {
    expect(isTransientError(error)).toBe(expected);
  });
});

describe('isTransactionAbortedError', () => {
  it.each<[string, unknown, boolean]>([
    ['25P02', withCode('25P02'), true],
    ['25P02 wrapped by TypeORM', wrapped('25P02'), true],
    ['23505', withCode('23505'), false],
    ['undefined', undefined, false],
  ])('%s -> %s', (_name, error, expected) => {
    expect(isTransactionAbortedError(error)).toBe(expected);
  });
});
