import { type StoredResponse } from './stored-response.js';

/** The fencing token of a claim: its `lock_version` and the row's own `claim_id`. */
export interface Fence {
  lockVersion: string;
  claimId: string;
}

/** What a failed claim found in the store: the design's `Row`. */
export type ExistingKey =
  | {
      state: 'started';
      fingerprint: Buffer;
      leaseExpired: boolean;
      /** Seconds until the lease expires, rounded up: the 409's `Retry-After`. */
      leaseSecondsLeft: number;
      fence: Fence;
    }
  | {
      state: 'done';
      fingerprint: Buffer;
      response: StoredResponse;
      /** How long ago it finished (infinite when unknown): what is left of its retention. */
      finishedAgeMs?: number;
    };

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
  | { kind: 'take-over'; fence: Fence };

/**
 * The design's `decide`: a fingerprint mismatch wins over everything (a different request
 * must never see another's answer, nor wait for it), then a finished key replays, a live
 * lease answers "in progress", and an expired one is taken over.
 */
export function decide(existing: ExistingKey, fingerprint: Buffer): Decision {
  if (!existing.fingerprint.equals(fingerprint)) return { kind: 'mismatch' };
  if (existing.state === 'done') return { kind: 'replay', response: existing.response };
  if (existing.leaseExpired) return { kind: 'take-over', fence: existing.fence };
  return { kind: 'in-progress', retryAfterSeconds: Math.max(1, existing.leaseSecondsLeft) };
}
