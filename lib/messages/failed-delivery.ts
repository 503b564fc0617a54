import { type Failure } from '../transaction/failure.js';

/** What is known of a message's failed deliveries, this one included. */
export interface DeliveryFailures {
  /**
   * The database failed for a passing reason (unreachable, a deadline, a deadlock): such a
   * failure is not the message's, and never counts towards giving it up.
   */
  passing: boolean;
  /** The database's count of the message's failures; undefined when it could not be had. */
  counted: number | undefined;
  /** This process's count of the message's failures that count: the floor of the true count. */
  seen: number;
  /** This process's count of all of the message's failed deliveries, for the backoff. */
  failures: number;
}

/** What to do with a delivery that failed. */
export type FailedDelivery =
  { action: 'redeliver'; delayMs: number } | { action: 'give-up'; attempts: number };

/** The backoff's first wait and its ceiling, in milliseconds. */
export const REDELIVERY_BASE_MS = 100;
export const REDELIVERY_MAX_MS = 5000;

/**
 * After a failure: deliver again, or give the message up once it failed `maxAttempts` times
 * (a poison message: redelivering it for ever would stall its queue).
 *
 * The attempts are the database's count, or this process's when that is higher or missing: a
 * count that cannot be had (the failure's record failed too) must not mean "deliver again"
 * for ever, so the process's own count is the floor, and the message is given up once it
 * reaches `maxAttempts` here. Without the database's count, and after the database's passing
 * failures (never counted: a database outage dead-letters nothing), the message goes back
 * after a backoff (doubling from 100 ms to 5 s), not at once: redelivered at once, it looped
 * hundreds of times a second. A counted failure goes back at once, as before.
 */
export function afterFailure(failures: DeliveryFailures, maxAttempts: number): FailedDelivery {
  const backoff = {
    action: 'redeliver',
    delayMs: Math.min(REDELIVERY_MAX_MS, REDELIVERY_BASE_MS * 2 ** (failures.failures - 1)),
  } as const;
  if (failures.passing) return backoff;
  const attempts = Math.max(failures.counted ?? 0, failures.seen);
  if (attempts >= maxAttempts) return { action: 'give-up', attempts };
  return failures.counted === undefined ? backoff : { action: 'redeliver', delayMs: 0 };
}

/**
 * The error a failed delivery raises to the app's exception filters (and through them to a
 * `@MessagePattern` requester): for a failure of the database (unreachable, a deadline, a
 * deadlock; a pooler's misfit or a permanent error of the library's statements), the library's
 * own error (`store_unavailable`, `database_transient`...), with the data layer's as its
 * `cause`, whichever statement met it, the handler's own included, as an HTTP request answers
 * 503 for it; else what was thrown, the handler's own answer. The data layer's error as it is
 * (a `QueryFailedError`, pg's "Connection terminated unexpectedly") would read as the handler's
 * own failure, and an outage as a reason not to retry.
 */
export function raisedError(failure: Failure, thrown: unknown): unknown {
  return failure.kind === 'final' ? thrown : failure.error;
}
