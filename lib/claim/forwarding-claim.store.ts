import { type EntityManager } from 'typeorm';
import { type Fence } from '../decisions/decide.js';
import { type ActiveClaim } from '../shapes/active-claim.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type StoreTransaction } from '../shapes/store-transaction.js';
import {
  type ClaimInOutcome,
  type ClaimOutcome,
  type ClaimStore,
  isTransactional,
  type KeyScope,
  type TransactionalClaimStore,
} from '../shapes/claim-store.interface.js';

/**
 * A claim store that hands every call to another: the base of the layers that change what is
 * stored (sealing, bodies by pointer) on any store. It is transactional exactly when the store
 * it wraps is, so a layer never hides nor invents the ability to commit with the app's work.
 */
export class ForwardingClaimStore implements TransactionalClaimStore {
  declare readonly transactional: true;

  constructor(protected readonly inner: ClaimStore) {
    (this as { transactional: boolean }).transactional = inner.transactional;
  }

  get expiresKeysAfterMs(): number | undefined {
    return this.inner.expiresKeysAfterMs;
  }

  /** The inner store's, or `apart` from a store that has none: the caller claims apart. */
  claimIn(
    scope: KeyScope,
    fingerprint: Buffer,
    leaseMs: number,
    transaction: StoreTransaction,
    waitMs: number,
  ): Promise<ClaimInOutcome> {
    const inner = this.transactionalInner();
    return inner.claimIn
      ? inner.claimIn(scope, fingerprint, leaseMs, transaction, waitMs)
      : Promise.resolve({ kind: 'apart' });
  }

  claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number): Promise<ClaimOutcome> {
    return this.inner.claim(scope, fingerprint, leaseMs);
  }

  takeOver(scope: KeyScope, fence: Fence, leaseMs: number): Promise<ActiveClaim | undefined> {
    return this.inner.takeOver(scope, fence, leaseMs);
  }

  finish(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    return this.inner.finish(claim, response);
  }

  finishIn(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction: StoreTransaction,
  ): Promise<boolean> {
    return this.transactionalInner().finishIn(claim, response, transaction);
  }

  completeAnswer(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    return this.inner.completeAnswer
      ? this.inner.completeAnswer(claim, response)
      : Promise.resolve(false);
  }

  commitPhase<T>(
    claim: ActiveClaim,
    phase: string,
    work: (manager: EntityManager) => Promise<T>,
    holder?: StoreTransaction,
  ): Promise<T> {
    return this.transactionalInner().commitPhase(claim, phase, work, holder);
  }

  release(claim: ActiveClaim, forget: boolean): Promise<void> {
    return this.inner.release(claim, forget);
  }

  extendLease(claim: ActiveClaim): Promise<boolean> {
    return this.inner.extendLease(claim);
  }

  extendLeaseIn(claim: ActiveClaim, transaction: StoreTransaction): Promise<boolean> {
    const inner = this.transactionalInner();
    return inner.extendLeaseIn ? inner.extendLeaseIn(claim, transaction) : inner.extendLease(claim);
  }

  /** The inner store's, or nothing to carry (an empty statement is left out of the BEGIN). */
  holdLeaseText(claim: ActiveClaim, literal: (value: string) => string): string {
    return this.transactionalInner().holdLeaseText?.(claim, literal) ?? '';
  }

  purgeBatch(retentionMs: number, batchSize: number): Promise<KeyScope[]> {
    return this.inner.purgeBatch(retentionMs, batchSize);
  }

  purgeAbandonedBatch(horizonMs: number, batchSize: number): Promise<number> {
    return this.inner.purgeAbandonedBatch(horizonMs, batchSize);
  }

  oldestUnfinishedAgeMs(): Promise<number | undefined> {
    return this.inner.oldestUnfinishedAgeMs();
  }

  protected transactionalInner(): TransactionalClaimStore {
    if (!isTransactional(this.inner)) {
      throw new Error("this claim store cannot commit in the app's transaction");
    }
    return this.inner;
  }
}
