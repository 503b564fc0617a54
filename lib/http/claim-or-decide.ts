import { type Logger } from '@nestjs/common';
import { mergeMap, type Observable } from 'rxjs';
import { decide, type ExistingKey, type Fence } from '../decisions/decide.js';
import { type IdempotencyEvent, publish, type Publish } from '../events/idempotency-events.js';
import { whileSubscribed } from '../claim/while-subscribed.js';
import {
  type IdempotencyError,
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
} from '../shapes/idempotency.errors.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type ActiveClaim } from '../shapes/active-claim.js';
import { type ClaimStore, type KeyScope } from '../shapes/claim-store.interface.js';

/** What a key found taken means for the request: `decide()`'s decision, as the edge acts on it. */
export type FoundKey =
  /** Its stored answer goes out; `finishedAgeMs` when it is finished (to be remembered). */
  | { kind: 'replay'; response: StoredResponse; finishedAgeMs?: number }
  /** Refused, with the event that says why. */
  | { kind: 'refuse'; event: 'mismatch' | 'conflict'; error: IdempotencyError }
  /**
   * Its lease ran out, or it was given back without an answer (`resumes`): the request takes
   * the key over, fenced by what it found.
   */
  | { kind: 'take-over'; fence: Fence; resumes: boolean };

/** The decision on a key that was taken, with the error of each refusal. */
export function onFoundKey(
  existing: ExistingKey,
  fingerprint: Buffer,
  conflictRetryAfterSeconds?: number,
): FoundKey {
  const decision = decide(existing, fingerprint, conflictRetryAfterSeconds);
  const refuse = (event: 'mismatch' | 'conflict', error: IdempotencyError): FoundKey => ({
    kind: 'refuse',
    event,
    error,
  });
  switch (decision.kind) {
    case 'replay':
      return {
        kind: 'replay',
        response: decision.response,
        finishedAgeMs: existing.state === 'done' ? (existing.finishedAgeMs ?? Infinity) : undefined,
      };
    case 'mismatch':
      return refuse('mismatch', new IdempotencyKeyMismatchError());
    case 'in-progress':
      return refuse('conflict', new IdempotencyKeyInProgressError(decision.retryAfterSeconds));
    case 'take-over':
      return { kind: 'take-over', fence: decision.fence, resumes: decision.resumes };
  }
}

/** What the claim step ends in: the key is the request's, or its stored answer goes out. */
export type ClaimResult<Transaction = never> =
  /** `transaction`: the request's, which holds the claim uncommitted (`oneCommit`). */
  | { kind: 'owned'; claim: ActiveClaim; transaction?: Transaction }
  | { kind: 'replay'; response: StoredResponse; finishedAgeMs?: number };

/**
 * Claims the key, or decides on what holds it and takes an expired lease over; a refusal is
 * thrown (an `IdempotencyError`). Publishes the claim's events (`claimed`, `takenOver` or
 * `resumed`, `conflict`, `mismatch`) through `publishAs` (a tick's skip is not a conflict);
 * the caller publishes the replay's.
 */
export function claimOrDecide(
  store: ClaimStore,
  scope: KeyScope,
  fingerprint: Buffer,
  leaseMs: number,
  event: () => IdempotencyEvent,
  logger: Logger,
  conflictRetryAfterSeconds?: number,
  left?: (landed: Promise<unknown>) => void,
  publishAs: Publish = publish,
): Observable<ClaimResult> {
  return whileSubscribed(
    store.claim(scope, fingerprint, leaseMs),
    (outcome) =>
      outcome.kind === 'claimed'
        ? giveBackOrphaned(store, outcome.claim, 'claimed', event, logger)
        : undefined,
    left,
  ).pipe(
    mergeMap((outcome): Observable<ClaimResult> | ClaimResult[] => {
      if (outcome.kind === 'claimed') {
        publishAs('claimed', event);
        return [{ kind: 'owned', claim: outcome.claim }];
      }
      return onExisting(
        store,
        scope,
        fingerprint,
        outcome.existing,
        leaseMs,
        event,
        logger,
        conflictRetryAfterSeconds,
        left,
        publishAs,
      );
    }),
  );
}

/**
 * What a claim that found the key taken ends in: its stored answer, a refusal (thrown), or
 * the key taken over (an expired lease, or one given back). Publishes as `claimOrDecide`.
 */
export function onExisting(
  store: ClaimStore,
  scope: KeyScope,
  fingerprint: Buffer,
  existing: ExistingKey,
  leaseMs: number,
  event: () => IdempotencyEvent,
  logger: Logger,
  conflictRetryAfterSeconds?: number,
  left?: (landed: Promise<unknown>) => void,
  publishAs: Publish = publish,
): Observable<ClaimResult> | ClaimResult[] {
  const found = onFoundKey(existing, fingerprint, conflictRetryAfterSeconds);
  switch (found.kind) {
    case 'replay':
      return [found];
    case 'refuse':
      publishAs(found.event, event);
      throw found.error;
    case 'take-over':
      return whileSubscribed(
        store.takeOver(scope, found.fence, leaseMs),
        (claim) =>
          claim
            ? giveBackOrphaned(store, claim, found.resumes ? 'resumed' : 'takenOver', event, logger)
            : undefined,
        left,
      ).pipe(
        mergeMap((claim): ClaimResult[] => {
          // Another worker won the same expired lease a moment before us.
          if (!claim) {
            publishAs('conflict', event);
            throw new IdempotencyKeyInProgressError(1);
          }
          publishAs(found.resumes ? 'resumed' : 'takenOver', event);
          return [{ kind: 'owned', claim }];
        }),
      );
  }
}

/**
 * A claim or takeover that lands after the request is gone (an outer timeout answered while
 * it was in flight) is given back at once: nobody will run the handler for it.
 */
function giveBackOrphaned(
  store: ClaimStore,
  claim: ActiveClaim,
  taken: 'claimed' | 'takenOver' | 'resumed',
  event: () => IdempotencyEvent,
  logger: Logger,
): Promise<void> {
  publish(taken, event);
  return store.release(claim, true).then(
    () => publish('released', () => ({ ...event(), reason: 'before_handler' })),
    (error: unknown) =>
      logger.warn(`could not give back the late claim of ${claim.key}: ${String(error)}`),
  );
}
