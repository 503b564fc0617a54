import {
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
  IdempotencyLeaseLostError,
  IdempotencyStoreUnavailableError,
  PermanentDatabaseError,
  RetryLaterError,
  TransientDatabaseError,
} from '../shapes/idempotency.errors.js';
import {
  JobKeyUnusableError,
  JobQueueTenantTooLongError,
  JobQueueTenantUnstorableError,
  JobResultUnstorableError,
} from './job-errors.js';
import { afterJobError, isJobStep } from './job-failure.js';

describe('afterJobError', () => {
  it.each([
    [
      'its key held by a run still at it',
      new IdempotencyKeyInProgressError(3),
      { kind: 'delay', ms: 3000 },
    ],
    [
      'its key lost to another worker',
      new IdempotencyLeaseLostError(),
      { kind: 'delay', ms: 1000 },
    ],
    [
      'the database unreachable',
      new IdempotencyStoreUnavailableError(new Error('ECONNREFUSED')),
      { kind: 'delay', ms: 1000 },
    ],
    [
      'a passing failure of the database',
      new TransientDatabaseError(new Error('deadlock detected')),
      { kind: 'delay', ms: 1000 },
    ],
    ['a retry the library asks for', new RetryLaterError('later', 2), { kind: 'delay', ms: 2000 }],
    ['its key used by a job with other data', new IdempotencyKeyMismatchError(), { kind: 'fail' }],
    [
      'a key it cannot keep',
      new JobKeyUnusableError('P.process', 'its key is over 255 characters'),
      { kind: 'fail' },
    ],
    [
      'a queue whose tenant the keys table cannot hold',
      new JobQueueTenantTooLongError('P.process', 'bullmq:' + 'q'.repeat(250)),
      { kind: 'fail' },
    ],
    [
      'a queue whose tenant holds a NUL (adversary 99)',
      new JobQueueTenantUnstorableError('P.process', 'bullmq:a\u0000b', 'holds a NUL character'),
      { kind: 'fail' },
    ],
    [
      // The library's statement refused for a text it sent (22021): an attempt, never delayed.
      'a statement of the library’s refused for a NUL (22021), as the store says it',
      new PermanentDatabaseError(
        Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), {
          code: '22021',
          severity: 'ERROR',
        }),
      ),
      { kind: 'throw' },
    ],
    [
      'a driver’s 22021 as it is (no passing failure)',
      Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), {
        code: '22021',
        severity: 'ERROR',
      }),
      { kind: 'throw' },
    ],
    [
      'a result JSON cannot write',
      new JobResultUnstorableError('P.process', new TypeError('BigInt')),
      { kind: 'fail' },
    ],
    ['the job’s own error', new Error('the bank refused'), { kind: 'throw' }],
    ['a thrown value that is no Error', 'refused', { kind: 'throw' }],
  ] as const)('%s', (_name, error, step) => {
    expect(afterJobError(error)).toEqual(step);
  });

  const timedOut = Object.assign(new Error('canceling statement due to statement timeout'), {
    code: '57014',
  });
  it.each([
    [
      'its own statement timed out (57014): an attempt, as without the library',
      timedOut,
      { kind: 'throw' },
    ],
    [
      'a passing failure of a statement of the library (a phase commit): delayed, no attempt',
      new TransientDatabaseError(new Error('deadlock detected')),
      { kind: 'delay', ms: 1000 },
    ],
    [
      'the database gone under a statement of the library: delayed, no attempt',
      new IdempotencyStoreUnavailableError(new Error('ECONNREFUSED')),
      { kind: 'delay', ms: 1000 },
    ],
    ['a retry it asks for itself', new RetryLaterError('later', 2), { kind: 'delay', ms: 2000 }],
    ['its key used by a job with other data', new IdempotencyKeyMismatchError(), { kind: 'fail' }],
    ['its own error', new Error('the bank refused'), { kind: 'throw' }],
  ] as const)('thrown by its work: %s', (_name, error, step) => {
    expect(afterJobError(error, true)).toEqual(step);
  });

  it('the same timeout met by the library (its claim or commit): delayed, no attempt counted', () => {
    expect(afterJobError(new TransientDatabaseError(timedOut))).toEqual({
      kind: 'delay',
      ms: 1000,
    });
  });
});

describe('isJobStep', () => {
  const named = (name: string) => Object.assign(new Error('moved'), { name });
  it.each([
    ['DelayedError (moveToDelayed, then thrown)', named('DelayedError'), true],
    ['WaitingChildrenError', named('WaitingChildrenError'), true],
    ['WaitingError', named('WaitingError'), true],
    [
      "BullMQ's rate limit (told by its message, as its worker does)",
      Object.assign(new Error('bullmq:rateLimitExceeded'), { name: 'RateLimitError' }),
      true,
    ],
    [
      "an app's own error named RateLimitError (a partner's 429): the job's error",
      named('RateLimitError'),
      false,
    ],
    ['UnrecoverableError: the job failed', named('UnrecoverableError'), false],
    ['the job’s own error', new Error('the bank refused'), false],
    ['a thrown value that is no Error', 'DelayedError', false],
  ] as const)('%s', (_name, error, step) => {
    expect(isJobStep(error)).toBe(step);
  });
});
