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
      /** Seconds until the lease expires, rounded up: the most the 409's `Retry-After` says. */
      leaseSecondsLeft: number;
      /**
       * Given back by its owner without an answer (`RetryLaterError`, a transient failure),
       * rather than left to expire: its retry resumes it. Undefined where the store cannot
       * tell; then an expired lease counts as taken over.
       */
      released?: boolean;
      fence: Fence;
    }
  | {
      state: 'done';
      fingerprint: Buffer;
      response: StoredResponse;
      /** How long ago it finished (infinite when unknown): what is left of its retention. */
      finishedAgeMs?: number;
    };
