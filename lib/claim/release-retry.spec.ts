import {
  IdempotencyStoreUnavailableError,
  PermanentDatabaseError,
} from '../shapes/idempotency.errors.js';
import { FAST_FAILURE_MS, RELEASE_ATTEMPTS, releaseRetryDelay } from './release-retry.js';

const connectionLost = Object.assign(new Error('terminating connection'), {
  code: '57P01',
  severity: 'FATAL',
});
const unavailable = new IdempotencyStoreUnavailableError(new Error('Connection terminated'));

describe('releaseRetryDelay', () => {
  it.each([
    ['a dead pooled connection, first try', 1, 3, unavailable, 20],
    ['a dead pooled connection, second try', 2, 3, unavailable, 40],
    ['a dead pooled connection, third try', 3, 3, unavailable, 80],
    ['the last try', RELEASE_ATTEMPTS, 3, unavailable, undefined],
    ['a deadline met (the server does not answer)', 1, FAST_FAILURE_MS, unavailable, undefined],
    ["a driver's connection error (a store of the app's)", 1, 3, connectionLost, 20],
    ['a plain error (a bug, the fence lost)', 1, 3, new Error('boom'), undefined],
  ])('%s: %s', (_case, attempt, tookMs, error, expected) => {
    expect(releaseRetryDelay({ attempt, tookMs, error })).toBe(expected);
  });

  it('a permanent error is not tried again', () => {
    const error = new PermanentDatabaseError(new Error('permission denied'), 'GRANT it');
    expect(releaseRetryDelay({ attempt: 1, tookMs: 3, error })).toBeUndefined();
  });
});
