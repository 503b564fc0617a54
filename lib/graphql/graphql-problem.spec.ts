import {
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
  IdempotencyResponseTooLargeError,
  IdempotencyStoreUnavailableError,
  RetryLaterError,
  TransientDatabaseError,
} from '../idempotency.errors.js';
import { decodeAnswer } from './field-answer.js';
import { problemAnswer, problemError } from './graphql-problem.js';

describe('problemError', () => {
  it.each([
    [new IdempotencyKeyInProgressError(3), { code: 'key_in_progress', status: 409, retryAfter: 3 }],
    [new IdempotencyKeyMismatchError(), { code: 'key_mismatch', status: 422 }],
    [
      new IdempotencyStoreUnavailableError(new Error('down')),
      { code: 'store_unavailable', status: 503, retryAfter: 1 },
    ],
    [
      new TransientDatabaseError(new Error('deadlock'), 2),
      { code: 'database_transient', status: 503, retryAfter: 2 },
    ],
    [new RetryLaterError('later', 5), { code: 'retry_later', status: 503, retryAfter: 5 }],
    [new IdempotencyResponseTooLargeError(10), { code: 'response_too_large', status: 500 }],
  ])('answers %s with extensions %j', (error, extensions) => {
    expect(problemError(error)).toEqual({ kind: 'graphql', message: error.message, extensions });
    const stored = problemAnswer(error);
    expect(stored.status).toBe(extensions.status);
    expect(decodeAnswer(stored)).toEqual({ kind: 'error', error: problemError(error) });
  });
});
