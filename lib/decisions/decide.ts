import { DEFAULT_CONFLICT_RETRY_AFTER_SECONDS } from '../shapes/idempotency.constants.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type Fence, type ExistingKey } from '../shapes/existing-key.js';
export { type Fence, type ExistingKey } from '../shapes/existing-key.js';

/**
 * A lease as `decide` reads it, from its end and the store's clock in milliseconds: expired
 * once its end is past, and the seconds left rounded up (the 409's `Retry-After`). For the
 * stores that keep times in milliseconds; PostgreSQL computes the same in its claim.
 */
export function leaseOf(
  lockedUntilMs: number,
  nowMs: number,
): { leaseExpired: boolean; leaseSecondsLeft: number } {
  return {
    leaseExpired: lockedUntilMs < nowMs,
    leaseSecondsLeft: Math.max(0, Math.ceil((lockedUntilMs - nowMs) / 1000)),
  };
}

/** What to do about it: the design's `Decision`. Only the interceptor maps it to HTTP. */
export type Decision =
  | { kind: 'mismatch' }
  | { kind: 'replay'; response: StoredResponse }
  | { kind: 'in-progress'; retryAfterSeconds: number }
  | {
      kind: 'take-over';
      fence: Fence;
      /** The key was given back, not abandoned: the outcome is `resumed`, not `taken_over`. */
      resumes: boolean;
    };

/**
 * The 409's `Retry-After`: when the duplicate should come back, which is when the work is
 * likely done, not when the lease ends (a lease outlasts the work it guards, and the
 * heartbeat renews it for as long as that runs: a 2 s request under a 60 s lease sent its
 * duplicates away for a minute). The route's `conflictRetryAfterSeconds`, never past the
 * lease (by then the key is either finished or free to take over), and never under 1 s.
 */
export function conflictRetryAfterSeconds(leaseSecondsLeft: number, configured: number): number {
  return Math.max(1, Math.min(configured, leaseSecondsLeft));
}

/**
 * The design's `decide`: a fingerprint mismatch wins over everything (a different request
 * must never see another's answer, nor wait for it), then a finished key replays, a live
 * lease answers "in progress", and an expired one is taken over.
 */
export function decide(
  existing: ExistingKey,
  fingerprint: Buffer,
  retryAfterSeconds: number = DEFAULT_CONFLICT_RETRY_AFTER_SECONDS,
): Decision {
  if (!existing.fingerprint.equals(fingerprint)) return { kind: 'mismatch' };
  if (existing.state === 'done') return { kind: 'replay', response: existing.response };
  if (existing.leaseExpired) {
    return { kind: 'take-over', fence: existing.fence, resumes: existing.released === true };
  }
  return {
    kind: 'in-progress',
    retryAfterSeconds: conflictRetryAfterSeconds(existing.leaseSecondsLeft, retryAfterSeconds),
  };
}
