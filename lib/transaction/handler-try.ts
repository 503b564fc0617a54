import { FrameSlotStorage } from './request-frame.js';
import { RetriedTryStatementError } from './seam-errors.js';

/** A try of the route's handler (see `IdempotencyContext.lastTry`). */
export interface HandlerTry {
  /** The method called. */
  method: unknown;
  /** Its outcome settled: nothing of it runs any more. */
  settled: boolean;
  /**
   * It returned a native Promise that has not resolved or rejected yet: a value the chain
   * gives meanwhile is not its answer (see `run-owned.ts`).
   */
  pending?: boolean;
  /**
   * An interceptor inside `@Idempotent()` called the handler again after it: work of this try
   * still running (a step its Promise did not wait for) is refused the request's transaction.
   */
  superseded?: boolean;
}

/**
 * The try whose code runs, through its awaits (set by the wrapper `@Idempotent()` puts on the
 * handler): a wrapped method called from within it (a sibling route method) runs in the same
 * try. Nest calls the handler from the interceptors' chain, never from within a handler, so a
 * retrying interceptor's second call is outside any try.
 */
export const handlerTries = new FrameSlotStorage<HandlerTry>('handlerTry');

/** Whether the code running is work of a try that was retried since (see `superseded`). */
export function inRetriedTry(): boolean {
  return handlerTries.getStore()?.superseded === true;
}

/**
 * Refuses work of a try that was retried since, wherever it reaches the database through the
 * data layers the library joins: the request's transaction, while it runs or after it ended
 * (a late write would otherwise run apart, on a connection of its own, once the retry's
 * answer committed), and the pool or DataSource itself once the request is over.
 */
export function refuseRetriedTry(): void {
  const refused = retriedTryRefusal();
  if (refused) throw refused;
}

/** The refusal `refuseRetriedTry` throws, for a caller that answers errors its own way. */
export function retriedTryRefusal(): RetriedTryStatementError | undefined {
  return inRetriedTry() ? new RetriedTryStatementError() : undefined;
}
