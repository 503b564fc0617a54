import { type HttpException, type Logger } from '@nestjs/common';
import { type IdempotencyError } from '../shapes/idempotency.errors.js';
import { type IdempotencyContext } from './idempotency-context.js';
import { type ResolvedIdempotencyOptions } from '../shapes/idempotency-options.interface.js';
import { type KeyScope, type ClaimStore } from '../shapes/claim-store.interface.js';
import { type LeaseRenewals } from '../claim/lease-renewals.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type IdempotencyEvent, publish } from '../events/idempotency-events.js';

/**
 * What the steps of a request that owns its key share: made once by the interceptor from what
 * Nest injects, so that each step is a function of its inputs.
 */
export interface OwnerTools {
  readonly options: ResolvedIdempotencyOptions;
  readonly logger: Logger;
  readonly renewals: LeaseRenewals;
  /** The library's answer to `error` as bytes, in the app's shape if it has one. */
  problem(error: IdempotencyError): StoredResponse;
  /** The library's error as the HttpException the filters render, its headers set. */
  toHttp(response: object, error: IdempotencyError): HttpException;
  /**
   * Keeps a finished key in this process's memory, for the retries that come back here, never
   * longer than `store` keeps it.
   */
  remember(
    scope: KeyScope,
    fingerprint: Buffer,
    response: StoredResponse,
    store: ClaimStore,
    finishedAgeMs: number,
  ): void;
  /** The HTTP adapter's type (`express`, `fastify`): how a late answer is rendered. */
  adapterType(): string;
}

/** Gives the request's key back (see `LeaseRenewals.release`). */
export function releaseQuietly(
  tools: OwnerTools,
  context: IdempotencyContext,
  forget: boolean,
): Promise<void> {
  // A claim that was to commit with the work (`oneCommit`) was rolled back with it: the key
  // is free already, and its heartbeat stops as at a release (a retry may claim it anew).
  if (context.transaction?.claimErased) {
    tools.renewals.stop(context.claim!);
    return Promise.resolve();
  }
  return tools.renewals.release(context.claimStore!, context.claim!, forget);
}

/** The event payload of an owned request: its route, tenant and key. */
export function eventOf(context: IdempotencyContext): IdempotencyEvent {
  return { route: context.route, tenant: context.claim!.tenantId, key: context.claim!.key };
}

/**
 * Gives the key back with nothing stored: the request's work rolled back, the key released
 * (`forget`: forgotten, as nothing of its handler ran), and `released` published with
 * `reason`. A release that fails only leaves the lease to run out (see `releaseQuietly`).
 */
export async function rollBackAndRelease(
  tools: OwnerTools,
  context: IdempotencyContext,
  reason: string,
  forget = false,
): Promise<void> {
  await context.transaction!.rollback();
  await releaseQuietly(tools, context, forget);
  publish('released', () => ({ ...eventOf(context), reason }));
}

/**
 * The tools of a run that has no HTTP answer (a BullMQ job, a scheduled tick): its record is
 * read from the database each time (the replay cache is HTTP retries'), and the library's
 * refusals are its problem documents. `adapter` names the transport in late-answer logs.
 */
export function headlessOwnerTools(
  options: ResolvedIdempotencyOptions,
  logger: Logger,
  renewals: LeaseRenewals,
  problem: (error: IdempotencyError) => StoredResponse,
  adapter: string,
): OwnerTools {
  return {
    // Every record of such a run is kept: `storeIf` chooses which HTTP answers a retry gets
    // again, and a job's or a tick's record is what its next run is told (adversary 63).
    options: { ...options, storeIf: () => true },
    logger,
    renewals,
    problem,
    toHttp: () => {
      throw new Error(`a ${adapter} run has no HTTP answer`);
    },
    remember: () => undefined,
    adapterType: () => adapter,
  };
}
