import { randomUUID } from 'node:crypto';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type RequestTransaction } from './request-transaction.js';
import { type ClaimStore } from '../shapes/claim-store.interface.js';
import { type ActiveClaim } from '../shapes/active-claim.js';
import { type HandlerTry } from './handler-try.js';
import { FrameSlotStorage } from './request-frame.js';

export { type ActiveClaim } from '../shapes/active-claim.js';

/**
 * What the library knows about the request being handled. One instance per idempotent
 * request, reached through `idempotencyStorage` so that singletons (PhaseRunner) can find it
 * without `Scope.REQUEST`, which would re-create the controller on every request.
 */
export class IdempotencyContext {
  /** Set by the handler wrapper of `@Idempotent()`: pipes and guards have passed. */
  handlerStarted = false;
  /**
   * What the route's handler itself returned (its Promise, its Observable, its value), kept by
   * the same wrapper; unset when it threw at once. An interceptor inside `@Idempotent()` (a
   * `timeout()`) may give up on it while it goes on, and the library then waits for it itself.
   */
  handlerReturned?: { value: unknown };
  /**
   * Whether that handler answered with an Observable (returned one, or a Promise that resolved
   * to one): the wrapped methods called while Nest subscribes to it are its siblings (see
   * `isOwnCall`).
   */
  handlerAnsweredWithObservable = false;
  /**
   * Whether that Observable has given a value, or ended: before it has, a value the chain
   * gives is an interceptor's in its place (a `timeout()` fallback that cancelled it), not its
   * answer.
   */
  handlerObservableAnswered = false;
  /**
   * The latest try of the route's handler: the method called (a call of it again, from
   * outside it, is a retry of an interceptor inside `@Idempotent()`), and whether its outcome
   * has settled (a try timed out by such an interceptor may still be running).
   */
  lastTry?: HandlerTry;
  /** `Controller.handler`, as the events name the route. */
  route = '';
  /**
   * Set when the request was torn down (an outer timeout) before its handler started and its
   * key was given back: the handler must then not start late, when a pipe finally resolves.
   */
  abandoned = false;
  /**
   * The response `PhaseRunner.finish()` made: stored with the request's transaction in place
   * of what the adapter writes, so that the first answer and every replay are the same bytes.
   */
  finished?: StoredResponse;
  private keyless?: string;

  /**
   * The base of the keys for external calls of a request without a key of its own: unique,
   * never reused. Made on first use, so that keyed requests do not pay for it.
   */
  get keylessId(): string {
    return (this.keyless ??= randomUUID());
  }

  constructor(
    /** The key this request owns; undefined for a request that sent none (optional keys). */
    readonly claim: ActiveClaim | undefined,
    /** The route's status (`@HttpCode()`, else 201 for POST, 200 otherwise). */
    readonly defaultStatus: number,
    /**
     * The request's transaction, when it owns a key: the handler's effects and its stored
     * response commit in it together.
     */
    readonly transaction?: RequestTransaction,
    /** Whether the handler's own database work joins `transaction` (the route's `atomic`). */
    private readonly atomic = false,
    /** The store that holds the claim: phases commit their recovery points in it. */
    readonly claimStore?: ClaimStore,
  ) {
    if (atomic && transaction) transaction.joinsAtHandler = true;
  }

  /**
   * Called as the handler itself starts, after guards and pipes: from now on what it does is
   * the request's execution, and its database work joins the request's transaction (a pipe's
   * reads before it did not need one).
   */
  startHandler(): void {
    // Its key was given back: another request may own it now, so this one must not run.
    if (this.abandoned) throw new Error('the request was abandoned before its handler ran');
    this.handlerStarted = true;
    if (this.atomic && this.transaction) this.transaction.joinable = true;
  }
}

/** The request's context: its slot of the library's one frame (see `request-frame.ts`). */
export const idempotencyStorage = new FrameSlotStorage<IdempotencyContext>('context');

/** The current request's context, if it is an idempotent request that owns its key. */
export function currentIdempotencyContext(): IdempotencyContext | undefined {
  return idempotencyStorage.getStore();
}
