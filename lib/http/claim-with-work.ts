import { type Logger } from '@nestjs/common';
import { mergeMap, type Observable } from 'rxjs';
import { type IdempotencyEvent, publish } from '../events/idempotency-events.js';
import { IdempotencyKeyInProgressError } from '../shapes/idempotency.errors.js';
import { type ResolvedRouteOptions } from '../shapes/idempotency-options.interface.js';
import { type ClaimResult, claimOrDecide, onExisting } from './claim-or-decide.js';
import { type KeyScope, type TransactionalClaimStore } from '../shapes/claim-store.interface.js';
import { whileSubscribed } from '../claim/while-subscribed.js';
import { type RequestTransaction } from '../transaction/request-transaction.js';

/**
 * The claim of a `oneCommit` route: the first statement of the request's transaction, which
 * commits it with the handler's effects and its stored answer (one commit per new key). A
 * claim of the same key not committed yet is waited on for `claimWaitMs`, then refused as in
 * progress (409); a key found taken is decided as by `claimOrDecide` (its stored answer, 422,
 * 409, or a takeover apart); a row committed after the claim's snapshot sends it the way of
 * the claim apart. Publishes the same events.
 */
export function claimWithWork(
  store: TransactionalClaimStore,
  transaction: RequestTransaction,
  scope: KeyScope,
  fingerprint: Buffer,
  route: ResolvedRouteOptions,
  event: () => IdempotencyEvent,
  logger: Logger,
  left?: (landed: Promise<unknown>) => void,
): Observable<ClaimResult<RequestTransaction>> {
  const { leaseMs, conflictRetryAfterSeconds } = route;
  // Its BEGIN goes with the claim: at the route's level (else the data layer's or server's).
  transaction.isolationLevel = route.isolationLevel;
  const claiming = store.claimIn!(scope, fingerprint, leaseMs, transaction, route.claimWaitMs);
  // Landed after the request was gone (an outer timeout answered while it was on its way):
  // rolled back, it leaves nothing, and a request waiting on it goes on.
  return whileSubscribed(claiming, () => transaction.rollback(), left).pipe(
    mergeMap(
      (
        outcome,
      ): Observable<ClaimResult<RequestTransaction>> | ClaimResult<RequestTransaction>[] => {
        switch (outcome.kind) {
          case 'claimed':
            publish('claimed', event);
            return [{ kind: 'owned', claim: outcome.claim, transaction }];
          case 'existing':
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
            );
          case 'held':
            publish('conflict', event);
            throw new IdempotencyKeyInProgressError(conflictRetryAfterSeconds);
          case 'apart':
            return claimOrDecide(
              store,
              scope,
              fingerprint,
              leaseMs,
              event,
              logger,
              conflictRetryAfterSeconds,
              left,
            );
        }
      },
    ),
  );
}
