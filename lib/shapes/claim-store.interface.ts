import { type EntityManager } from 'typeorm';
import { type ExistingKey, type Fence } from './existing-key.js';
import { type ActiveClaim } from './active-claim.js';
import { type StoredResponse } from './stored-response.js';
import { type StoreTransaction } from './store-transaction.js';

/** Which key: keys are scoped per tenant (the design's primary key). */
export interface KeyScope {
  tenantId: string;
  key: string;
}

/** The claim's outcome: this worker owns the key, or it found the record another request left. */
export type ClaimOutcome =
  { kind: 'claimed'; claim: ActiveClaim } | { kind: 'existing'; existing: ExistingKey };

/**
 * A claim made as the first statement of the request's transaction (`claimIn`): its outcome,
 * or `held` (a claim of the same key not committed yet outlasted the wait), or `apart` (to be
 * claimed apart, committed alone: it found neither a free key nor a row, one committed after
 * its snapshot; or the transaction is to run above READ COMMITTED, where the claim's reads of
 * the keys' table would make unrelated requests fail to serialize).
 */
export type ClaimInOutcome = ClaimOutcome | { kind: 'held' } | { kind: 'apart' };

/**
 * The claim store: what the claim/replay path needs, and nothing of the app's own database.
 * Each store (PostgreSQL, Redis, one of the app's) is held to the same contract, which the
 * package ships as a suite (`nestjs-idempotency-pg/testing`):
 *
 * - a key is claimed by exactly one of any number of concurrent claims, and keys differing in
 *   any character (case, Unicode form, the end of a long key) or tenant stay apart;
 * - a claim's lease is taken over only once it has expired, by exactly one worker, which gets
 *   the same `claimId` and a new `lockVersion`;
 * - every write after the claim is fenced by (`lockVersion`, `claimId`): a worker whose lease
 *   was taken over (or whose key was released and claimed anew) writes nothing;
 * - a finished key is replayed as stored until the retention window has passed since it
 *   finished, then purged; an unfinished key is never purged by the retention.
 */
export interface ClaimStore {
  /**
   * Whether `finish` can commit in the app's PostgreSQL transaction (`TransactionalClaimStore`):
   * atomic routes and phases need it, and refuse a store without it.
   */
  readonly transactional: boolean;
  /**
   * Set by a store whose finished keys expire on their own (a TTL) rather than by
   * `purgeBatch`: how long after its finish a key is kept. Bodies stored by pointer for its
   * keys are kept as long.
   */
  readonly expiresKeysAfterMs?: number;
  /** Statement 1 (and 2 on conflict) of the design: a new claim, or the record that is there. */
  claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number): Promise<ClaimOutcome>;
  /** Statement 3: wins an expired lease for exactly one worker; undefined if another did. */
  takeOver(scope: KeyScope, fence: Fence, leaseMs: number): Promise<ActiveClaim | undefined>;
  /** Statement 5 on its own: stores the response, ends the lease; false when fenced off. */
  finish(claim: ActiveClaim, response: StoredResponse): Promise<boolean>;
  /**
   * Replaces the stored response of a key this claim finished, once, after its finish: a
   * GraphQL mutation's answer committed with its effects, then completed with the outputs of
   * the field middleware on it once the operation's answer gave them (middleware-outputs.ts).
   * Fenced by the claim (`lockVersion`, `claimId`) and the key being finished; false when
   * fenced off. Optional: a store without it leaves those outputs unstored, and a replay of
   * such a field answers an error (`field_output_pending`).
   */
  completeAnswer?(claim: ActiveClaim, response: StoredResponse): Promise<boolean>;
  /**
   * Gives the key back without a response. `forget` (the handler never ran, nothing was
   * executed): a fresh first claim is deleted, so the client may fix the request and reuse the
   * key. Otherwise, and for a claim that was taken over or has completed phases, the record
   * stays and only its lease ends, so that a retry takes it over and resumes with the same
   * claim id. Fenced: a stale owner releases nothing.
   */
  release(claim: ActiveClaim, forget: boolean): Promise<void>;
  /** The heartbeat: false when the lease was lost. */
  extendLease(claim: ActiveClaim): Promise<boolean>;
  /**
   * Deletes up to `batchSize` keys that finished over `retentionMs` ago; returns them. A store
   * whose records expire on their own (a TTL) returns none.
   */
  purgeBatch(retentionMs: number, batchSize: number): Promise<KeyScope[]>;
  /** Deletes up to `batchSize` keys left unfinished since before `horizonMs`, lease expired. */
  purgeAbandonedBatch(horizonMs: number, batchSize: number): Promise<number>;
  /**
   * How long ago the oldest unfinished key was claimed, of those a worker holds or held (not
   * those given back on purpose, which wait for their retry); undefined when none is (or unknown).
   */
  oldestUnfinishedAgeMs(): Promise<number | undefined>;
}

/**
 * A claim store in the app's own PostgreSQL: its finish and its phases commit in one
 * transaction with the handler's effects, which is what atomic routes and phases stand on.
 */
export interface TransactionalClaimStore extends ClaimStore {
  readonly transactional: true;
  /**
   * Statement 5, run last in the request's transaction: commits the handler's effects with
   * the response; false (all rolled back) when another worker owns the key.
   */
  finishIn(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction: StoreTransaction,
  ): Promise<boolean>;
  /**
   * The heartbeat run inside the request's transaction, once that began above READ COMMITTED
   * (`RequestTransaction.isolated`): a renewal committed apart after its snapshot would make
   * its stored answer fail to serialize. False when the lease was lost.
   */
  extendLeaseIn?(claim: ActiveClaim, transaction: StoreTransaction): Promise<boolean>;
  /**
   * The renewal a `BEGIN` above READ COMMITTED carries in its round trip, as SQL text with its
   * values quoted by `literal`: the key's row is then locked by the transaction itself, for
   * its whole life. A renewal sent later may run inside a savepoint of the handler's, and a
   * rolled-back savepoint undoes it and releases its row lock: a retry would take a live
   * worker's key over.
   */
  holdLeaseText?(claim: ActiveClaim, literal: (value: string) => string): string;
  /**
   * The claim as the first statement of the request's transaction (`oneCommit`), in its
   * `BEGIN`'s round trip: it commits with the handler's effects and its stored answer, or
   * vanishes with a rollback. It waits at most `waitMs` on a claim of the same key that is not
   * committed yet. The transaction is rolled back unless the key is claimed.
   */
  claimIn?(
    scope: KeyScope,
    fingerprint: Buffer,
    leaseMs: number,
    transaction: StoreTransaction,
    waitMs: number,
  ): Promise<ClaimInOutcome>;
  /**
   * Statement 4: runs `work` in one transaction with the advance of the recovery point to
   * `phase` and the record of its result. Throws `IdempotencyLeaseLostError`, rolling
   * everything back, when another worker owns the key. `holder`: the request's transaction
   * while it holds the claim uncommitted (`oneCommit`): the phase takes the claim over
   * (`handClaimTo`) and commits it with its work, or hands it back without its work.
   */
  commitPhase<T>(
    claim: ActiveClaim,
    phase: string,
    work: (manager: EntityManager) => Promise<T>,
    holder?: StoreTransaction,
  ): Promise<T>;
}

export function isTransactional(store: ClaimStore): store is TransactionalClaimStore {
  return store.transactional;
}

/** Injection token of the app's PostgreSQL claim store (`'postgres'`, with its layers). */
export const ClaimStore = Symbol('ClaimStore');
