import { InvalidIdempotencyOptionsError, resolveRouteOptions } from '../idempotency-options.js';
import { POSTGRES_CLAIM_STORE } from '../idempotency-options.js';
import {
  type IdempotencyRouteOptions,
  type ResolvedRouteOptions,
} from '../shapes/idempotency-options.interface.js';

/** `@IdempotentTask()`'s options; the rest are the module's, as for a route. */
export interface IdempotentTaskOptions extends Pick<
  IdempotencyRouteOptions,
  'leaseMs' | 'heartbeat' | 'isolationLevel'
> {
  /**
   * The task's name, which its ticks' keys are kept under (`schedule:<name>`): the same on
   * every replica. Default: the schedule's name (`@Cron(…, { name })`, `@Interval(name, ms)`),
   * else `Class.method`.
   */
  name?: string;
  /**
   * How long a tick left unfinished (its replica died mid-tick, or it failed after a phase
   * committed) is resumed by the task's later ticks, in ms (default one hour). Older ones are
   * left to the operator (`keys list`).
   */
  resumeWithinMs?: number;
}

/** A task's options, resolved over the module's route defaults. */
export interface ResolvedTaskOptions {
  name?: string;
  resumeWithinMs: number;
  route: ResolvedRouteOptions;
}

const HOUR_MS = 3_600_000;

/**
 * Validates and fills in a task's options over `base` (the module's); `where` names the
 * method in the error a wrong option throws. Always atomic, in the app's PostgreSQL: the
 * tick's record commits with its effects.
 */
export function resolveTaskOptions(
  options: IdempotentTaskOptions,
  where: string,
  base?: ResolvedRouteOptions,
): ResolvedTaskOptions {
  const fail = (message: string) =>
    new InvalidIdempotencyOptionsError(`@IdempotentTask() on ${where}: ${message}`);
  const { name, resumeWithinMs = HOUR_MS, ...rest } = options;
  if (name !== undefined && (typeof name !== 'string' || name.length < 1 || name.length > 200)) {
    throw fail('name must be a string of 1 to 200 characters');
  }
  if (!Number.isSafeInteger(resumeWithinMs) || resumeWithinMs < 0) {
    throw fail('resumeWithinMs must be a whole number of milliseconds, 0 or more');
  }
  try {
    const route = resolveRouteOptions(
      { ...rest, atomic: true, claimStore: POSTGRES_CLAIM_STORE },
      base,
    );
    return { name, resumeWithinMs, route };
  } catch (error) {
    if (!(error instanceof InvalidIdempotencyOptionsError)) throw error;
    throw fail(error.message.replace(/^IdempotencyModule: /, ''));
  }
}
