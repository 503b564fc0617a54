import {
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
  IdempotencyKeyMissingError,
  IdempotencyRequestInvalidError,
  IdempotencyResponseTooLargeError,
  IdempotencyStoreUnavailableError,
  RetryLaterError,
  TransientDatabaseError,
} from '../shapes/idempotency.errors.js';
import { decodeAnswer } from './field-answer.js';
import { fieldMessage, problemAnswer, problemError } from './graphql-problem.js';

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
    expect(problemError(error)).toEqual({
      kind: 'graphql',
      message: fieldMessage(error),
      extensions,
    });
    const stored = problemAnswer(error);
    expect(stored.status).toBe(extensions.status);
    expect(decodeAnswer(stored)).toEqual({ kind: 'error', error: problemError(error) });
  });
});

describe('fieldMessage', () => {
  it.each([
    [
      new IdempotencyKeyMismatchError(),
      'This idempotency key was already used with a different operation (another mutation field, or other arguments); use a new key for a new operation.',
    ],
    [
      new IdempotencyKeyMissingError('the idempotencyKey argument'),
      'The idempotencyKey argument is required on this mutation; send one key per operation.',
    ],
    [
      new IdempotencyRequestInvalidError('the argument file is a Promise, not JSON'),
      "The field's arguments cannot be fingerprinted: the argument file is a Promise, not JSON.",
    ],
    [
      new IdempotencyResponseTooLargeError(200),
      "The field's answer is larger than this mutation's maxResponseBytes (200 bytes): it cannot be stored for replays, so nothing of the mutation was committed.",
    ],
    [
      new IdempotencyKeyInProgressError(1),
      'A request with this idempotency key is still being processed; retry later.',
    ],
  ])('says %s in GraphQL words', (error, message) => {
    expect(fieldMessage(error)).toBe(message);
    // No HTTP words left in it.
    expect(message).not.toMatch(/method|path|body|route/);
  });
});
