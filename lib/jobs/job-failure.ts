import { classifyHandlerError } from '../transaction/failure.js';
import { toProblem } from '../http/problem.js';
import { JobRefusedError } from './job-errors.js';
import {
  IdempotencyError,
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
} from '../shapes/idempotency.errors.js';

/**
 * What a job does after an error (a pure decision):
 *  - `delay`: the job goes back to BullMQ's delayed set for `ms`, no attempt counted: its key
 *    is held by another run (a stalled job's first worker still at it: a replay once it
 *    finished), or the database failed in passing as the library claimed or committed it
 *    (nothing of the job committed), or the job asked for it (`RetryLaterError`);
 *  - `fail`: failed for good (BullMQ's `UnrecoverableError`), its reason said: the key was used
 *    by a job with other data, or the library cannot keep this job's record (its key, its
 *    result); trying again would meet the same;
 *  - `throw`: the job's own error (`fromWork`: thrown by its work, the database's failures of
 *    its own statements too), as BullMQ has it without the library (its attempts, its
 *    backoff, its failed set); its effects rolled back, nothing kept.
 */
export type JobStep = { kind: 'delay'; ms: number } | { kind: 'fail' } | { kind: 'throw' };

export function afterJobError(error: unknown, fromWork = false): JobStep {
  // Its work's own error (a statement of its that timed out, met a lock timeout, lost its
  // connection, as the driver or its data layer throws it): as without the library, an
  // attempt, for BullMQ's backoff and failed set. Delayed with no attempt counted, a job whose
  // query always times out ran for ever (adversary 67). The library's errors met inside its
  // work (its statements' failures, `RetryLaterError`, a seam's refusal, a phase's commit) are
  // decided below, as at the claim or the commit.
  if (fromWork && !(error instanceof IdempotencyError)) return { kind: 'throw' };
  if (error instanceof IdempotencyKeyInProgressError) {
    return { kind: 'delay', ms: error.retryAfterSeconds * 1000 };
  }
  if (error instanceof IdempotencyKeyMismatchError || error instanceof JobRefusedError) {
    return { kind: 'fail' };
  }
  const failure = classifyHandlerError(error);
  if (failure.kind === 'lease-lost') return { kind: 'delay', ms: 1000 };
  if (failure.kind === 'retry') {
    // Passing (503: the database, a retry the library asks for): nothing committed.
    const { status, headers } = toProblem(failure.error);
    if (status === 503) return { kind: 'delay', ms: Number(headers['retry-after'] ?? 1) * 1000 };
    // A refusal of a statement of the job's (an open cursor, a statement beside a phase): a
    // fault of its code, for BullMQ's attempts and its failed set, with the library's words.
    return { kind: 'throw' };
  }
  // The library's other refusals, met before or after the job's work (never its own error).
  if (error instanceof IdempotencyError) return { kind: 'fail' };
  return { kind: 'throw' };
}

/**
 * BullMQ's errors that say a processor moved its job itself, not that it failed (its steps
 * idiom: `job.moveToDelayed(ts, token)` then `throw new DelayedError()`; the waiting-children
 * and waiting forms): told by name, as BullMQ's worker tells them.
 */
const STEP_ERRORS = new Map([
  ['DelayedError', 'delayed'],
  ['WaitingChildrenError', 'waiting-children'],
  ['WaitingError', 'waiting'],
] as const);

/**
 * Its rate limit (`worker.rateLimit()` then `throw Worker.RateLimitError()`), which BullMQ's
 * worker tells by this message, never by name: an app's own error named `RateLimitError` (a
 * partner's 429) is an error, which BullMQ counts and retries (adversary 68: its work was
 * committed as a step, then run again).
 */
const RATE_LIMIT_MESSAGE = 'bullmq:rateLimitExceeded';

/** Where a job that stepped moved itself (the `jobStep` event's `move`). */
export type JobStepMove = 'delayed' | 'waiting-children' | 'waiting' | 'rate-limit';

/** Whether `error` is one of them: the job's work so far stands, its key unfinished. */
export function isJobStep(error: unknown): boolean {
  return stepMoveOf(error) !== undefined;
}

/** Where the job moved itself, when `error` says it did. */
export function stepMoveOf(error: unknown): JobStepMove | undefined {
  if (!(error instanceof Error)) return undefined;
  if (error.message === RATE_LIMIT_MESSAGE) return 'rate-limit';
  return STEP_ERRORS.get(error.name as Parameters<typeof STEP_ERRORS.get>[0]);
}
