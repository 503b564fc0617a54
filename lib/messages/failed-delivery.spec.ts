import { DatabaseError } from 'pg';
import { QueryFailedError } from 'typeorm';
import { classifyHandlerError } from '../transaction/failure.js';
import {
  IdempotencyError,
  IdempotencyStoreUnavailableError,
  PermanentDatabaseError,
} from '../shapes/idempotency.errors.js';
import {
  afterFailure,
  type DeliveryFailures,
  type FailedDelivery,
  raisedError,
} from './failed-delivery.js';

describe('afterFailure (maxAttempts 3)', () => {
  const redeliver = (delayMs: number): FailedDelivery => ({ action: 'redeliver', delayMs });
  const giveUp = (attempts: number): FailedDelivery => ({ action: 'give-up', attempts });
  it.each<[string, DeliveryFailures, FailedDelivery]>([
    [
      'counted, under the bound: at once',
      { passing: false, counted: 1, seen: 1, failures: 1 },
      redeliver(0),
    ],
    ['counted, at the bound', { passing: false, counted: 3, seen: 1, failures: 1 }, giveUp(3)],
    [
      'counted past it (other consumers)',
      { passing: false, counted: 7, seen: 1, failures: 1 },
      giveUp(7),
    ],
    [
      'not counted, first: backoff',
      { passing: false, counted: undefined, seen: 1, failures: 1 },
      redeliver(100),
    ],
    [
      'not counted, second: doubled',
      { passing: false, counted: undefined, seen: 2, failures: 2 },
      redeliver(200),
    ],
    [
      'not counted, third: the floor gives up',
      { passing: false, counted: undefined, seen: 3, failures: 3 },
      giveUp(3),
    ],
    [
      'a count behind this process’s: the floor',
      { passing: false, counted: 1, seen: 3, failures: 3 },
      giveUp(3),
    ],
    [
      'passing: never given up, backoff',
      { passing: true, counted: undefined, seen: 0, failures: 1 },
      redeliver(100),
    ],
    [
      'passing, many times: capped at 5 s',
      { passing: true, counted: undefined, seen: 9, failures: 30 },
      redeliver(5000),
    ],
    [
      'passing after countable ones: still not given up',
      { passing: true, counted: undefined, seen: 5, failures: 6 },
      redeliver(3200),
    ],
  ])('%s', (_name, failures, expected) => {
    expect(afterFailure(failures, 3)).toEqual(expected);
  });
});

describe('raisedError: what a failed delivery raises, as the interceptor classifies it', () => {
  const pgError = (code: string) =>
    Object.assign(new DatabaseError(`pg ${code}`, 0, 'error'), { severity: 'ERROR', code });
  const typeorm = (code: string) => new QueryFailedError('INSERT', [], pgError(code));
  const unavailable = new IdempotencyStoreUnavailableError(new Error('ECONNREFUSED'));
  const permanent = new PermanentDatabaseError(typeorm('42P01'));
  it.each<[string, unknown, string | undefined]>([
    // The database failing under the handler's own statements: the library's error, with the
    // data layer's as its cause (before: the data layer's as it was, read as the handler's).
    [
      'the handler’s statement, its backend terminated (TypeORM)',
      typeorm('57P01'),
      'store_unavailable',
    ],
    [
      'the handler’s statement, its socket cut (pg)',
      new Error('Connection terminated unexpectedly'),
      'store_unavailable',
    ],
    ['a deadlock of the handler’s', typeorm('40P01'), 'database_transient'],
    // The library's own statements: their error is already the library's.
    ['the record, the database unreachable', unavailable, 'store_unavailable'],
    ['the record, refused for good', permanent, 'database_permanent'],
    // The handler's own answer stays its own, as it was thrown.
    ['the handler’s own unique violation', typeorm('23505'), undefined],
    ['a bug of the handler’s', new TypeError('x is undefined'), undefined],
  ])('%s', (_name, thrown, code) => {
    const raised = raisedError(classifyHandlerError(thrown), thrown);
    if (code === undefined) {
      expect(raised).toBe(thrown);
    } else {
      expect(raised).toBeInstanceOf(IdempotencyError);
      expect((raised as IdempotencyError).code).toBe(code);
      // The library's own error as it was thrown, or the library's with the thrown one as cause.
      if (!(thrown instanceof IdempotencyError)) expect((raised as Error).cause).toBe(thrown);
      else expect(raised).toBe(thrown);
    }
  });
});
