import { type EntityManager } from 'typeorm';
import { type ExistingKey, type Fence } from '../decide.js';
import { type ActiveClaim } from '../idempotency-context.js';
import { type StoredResponse } from '../stored-response.js';
import { type LazyTransaction } from '../transaction/lazy-transaction.js';

/** Which key: keys are scoped per tenant (the design's primary key). */
export interface KeyScope {
  tenantId: string;
  key: string;
}

/** The claim's outcome: this worker owns the key, or it found the row another request left. */
export type ClaimOutcome =
  { kind: 'claimed'; claim: ActiveClaim } | { kind: 'existing'; existing: ExistingKey };

/**
 * The store seam: the claim/replay path talks to this interface only, so that another store
 * (Redis for the claim, a pointer to large bodies) can stand behind the same calls. Every
 * write after the claim is fenced by `claim.lockVersion`: false means the lease was lost.
 */
export interface IdempotencyStore {
  /** Statement 1 (and 2 on conflict) of the design, in one round trip. */
  claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number): Promise<ClaimOutcome>;
  /** Statement 3: wins an expired lease for exactly one worker; undefined if another did. */
  takeOver(scope: KeyScope, fence: Fence, leaseMs: number): Promise<ActiveClaim | undefined>;
  /**
   * Statement 5: stores the response and clears the lease. Given the request's transaction,
   * it runs last in it and commits the handler's effects with the response; false (all
   * rolled back) when another worker owns the key.
   */
  complete(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction?: LazyTransaction,
  ): Promise<boolean>;
  /**
   * Gives the key back without a response. `forget` (the handler never ran, nothing was
   * executed): a fresh first claim is deleted, so the client may fix the request and reuse the
   * key. Otherwise, and for a claim that was taken over or has completed phases, the row stays
   * and only its lease ends, so that a retry takes it over and resumes with the same claim id.
   */
  release(claim: ActiveClaim, forget: boolean): Promise<void>;
  /**
   * Statement 4: runs `work` in one transaction with the advance of the recovery point to
   * `phase` and the record of its result. Throws `IdempotencyLeaseLostError`, rolling
   * everything back, when another worker owns the key.
   */
  commitPhase<T>(
    claim: ActiveClaim,
    phase: string,
    work: (manager: EntityManager) => Promise<T>,
  ): Promise<T>;
  /**
   * A request's transaction, opened by its first statement. `joinable`: code in its scope
   * that asks the DataSource for a runner (repositories, `dataSource.query()`) joins it.
   */
  transaction(joinable: boolean): LazyTransaction;
  /** Runs `work` in a plain transaction: phases of a request that has no key. */
  runInTransaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T>;
  /** Deletes up to `batchSize` keys that finished over `retentionMs` ago; returns them. */
  purgeBatch(retentionMs: number, batchSize: number): Promise<KeyScope[]>;
  /** Deletes up to `batchSize` keys left unfinished since before `horizonMs`, lease expired. */
  purgeAbandonedBatch(horizonMs: number, batchSize: number): Promise<number>;
  /** Deletes up to `batchSize` consumers' message ids processed before `retentionMs`. */
  purgeProcessedBatch(retentionMs: number, batchSize: number): Promise<number>;
  /** Deletes up to `batchSize` failure counts last updated before `retentionMs`. */
  purgeMessageFailuresBatch(retentionMs: number, batchSize: number): Promise<number>;
  /** Counts one more failed delivery of a consumer's message; returns the count. */
  recordMessageFailure(consumer: string, messageId: string, error: string): Promise<number>;
  /** How long ago the oldest unfinished key was claimed; undefined when none is. */
  oldestUnfinishedAgeMs(): Promise<number | undefined>;
  /** The heartbeat: false when the lease was lost. */
  extendLease(claim: ActiveClaim): Promise<boolean>;
}

/** Injection token of the store; same name as the interface, as @nestjs/throttler does. */
export const IdempotencyStore = Symbol('IdempotencyStore');
