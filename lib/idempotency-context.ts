import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { type StoredResponse } from './stored-response.js';

/** A key this worker owns: what the claim or the takeover returned. */
export interface ActiveClaim {
  tenantId: string;
  key: string;
  /** The row's own id: new for every claim of a key, shared by every worker that takes it over. */
  claimId: string;
  /** The fencing token: every write of this worker is conditional on it. */
  lockVersion: string;
  /** The last completed atomic phase (`start` when none has). */
  recoveryPoint: string;
  /** What the completed phases returned, by phase name. */
  phaseResults: Record<string, unknown>;
  leaseMs: number;
}

/**
 * What the library knows about the request being handled. One instance per idempotent
 * request, reached through `idempotencyStorage` so that singletons (PhaseRunner) can find it
 * without `Scope.REQUEST`, which would re-create the controller on every request.
 */
export class IdempotencyContext {
  /** Set by the handler wrapper of `@Idempotent()`: pipes and guards have passed. */
  handlerStarted = false;
  /**
   * Set when the request was torn down (an outer timeout) before its handler started and its
   * key was given back: the handler must then not start late, when a pipe finally resolves.
   */
  abandoned = false;
  /** The response `PhaseRunner.finish()` stored with the last phase, once it committed. */
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
  ) {}
}

/** The single AsyncLocalStorage of the library. */
export const idempotencyStorage = new AsyncLocalStorage<IdempotencyContext>();

/** The current request's context, if it is an idempotent request that owns its key. */
export function currentIdempotencyContext(): IdempotencyContext | undefined {
  return idempotencyStorage.getStore();
}
