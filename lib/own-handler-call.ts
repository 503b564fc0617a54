/** Where a call of a method `@Idempotent()` wraps is made (see `markHandlerStart`). */
export interface HandlerCall {
  /** Whether it is made for an idempotent request that owns its key. */
  inRequest: boolean;
  /** Whether it is made from within a wrapped method's run (its own code, through awaits). */
  insideHandler: boolean;
  /**
   * Whether the route's own handler answered with an Observable (returned one, or a Promise
   * that resolved to one), which Nest subscribes to outside the handler's run.
   */
  answeredWithObservable: boolean;
}

/**
 * Whether a call of a wrapped method is the route's own handler, whose outcome the request
 * waits for when an inner timeout gives up on it (`handlerReturned`). Nest calls it from the
 * interceptors' chain, once, or again for each retry of an interceptor inside `@Idempotent()`
 * (`retry()` then `timeout()`): the latest call is the attempt still running, the earlier ones
 * have failed. A sibling route method it calls (`this.create()`) is not: from within its run,
 * or lazily from the Observable it answered with (`defer(() => this.create())`), which the
 * timeout cancels with it (and a retry's new Observable is cancelled alike).
 */
export function isOwnCall(call: HandlerCall): boolean {
  return call.inRequest && !call.insideHandler && !call.answeredWithObservable;
}
