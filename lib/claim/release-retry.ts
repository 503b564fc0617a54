import { IdempotencyStoreUnavailableError } from '../shapes/idempotency.errors.js';
import { isConnectionError } from '../connection/connection-errors.js';

/** One failed try of a key's release, as `releaseRetryDelay` reads it. */
export interface FailedRelease {
  /** 1 for the first try. */
  attempt: number;
  /** How long the try took before it failed. */
  tookMs: number;
  error: unknown;
}

/** Tries in all: enough for the pool to hand out its dead idle connections and drop them. */
export const RELEASE_ATTEMPTS = 4;

/**
 * A try that failed sooner than this met a connection that was already dead (the pool still
 * held it), not a server that does not answer: the next try is worth it. A slower one ran into
 * its statement's deadline, and trying again would only hold the caller's answer longer.
 */
export const FAST_FAILURE_MS = 500;

/**
 * How long to wait before the release of a key is tried again, or `undefined` to give up (the
 * lease then runs out, and a retry takes the key over). After the database terminated its
 * backends (a restart, a failover, an administrator), the pool may hand out, one after another,
 * idle connections whose end it has not yet read; each failed try drops one, and a short pause
 * lets the pool read the others' end. Without it the key stays leased after its 503, and the
 * client's retry meets 409 until the lease runs out.
 */
export function releaseRetryDelay({ attempt, tookMs, error }: FailedRelease): number | undefined {
  // Anything else (a permanent error, the fence lost) is the same on every try. A store of the
  // app's may throw its driver's error as it is.
  if (!(error instanceof IdempotencyStoreUnavailableError) && !isConnectionError(error)) {
    return undefined;
  }
  if (attempt >= RELEASE_ATTEMPTS || tookMs >= FAST_FAILURE_MS) return undefined;
  return 10 * 2 ** attempt;
}
