import { type ActiveClaim } from '../shapes/active-claim.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type StoreTransaction } from '../shapes/store-transaction.js';
import {
  type ClaimInOutcome,
  type ClaimOutcome,
  type KeyScope,
} from '../shapes/claim-store.interface.js';
import { ForwardingClaimStore } from '../claim/forwarding-claim.store.js';

/**
 * A layer that changes what a claim store keeps of a response (sealing, bodies by pointer):
 * `stored` on the way in, at every finish, and `replayed` on the way out, for every finished
 * key a claim finds. The rest of the store is forwarded as it is.
 */
export abstract class ResponseLayer extends ForwardingClaimStore {
  /**
   * What the store keeps for `response`. `transaction` is the request's, when the finish
   * commits in it: what the layer writes elsewhere in the database may join it.
   */
  protected abstract stored(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction?: StoreTransaction,
  ): StoredResponse | Promise<StoredResponse>;

  /** The response as it went out, from what the store kept. */
  protected abstract replayed(
    scope: KeyScope,
    kept: StoredResponse,
  ): StoredResponse | Promise<StoredResponse>;

  override async claim(
    scope: KeyScope,
    fingerprint: Buffer,
    leaseMs: number,
  ): Promise<ClaimOutcome> {
    const outcome = await this.inner.claim(scope, fingerprint, leaseMs);
    if (outcome.kind === 'claimed' || outcome.existing.state !== 'done') return outcome;
    const response = await this.replayed(scope, outcome.existing.response);
    return { kind: 'existing', existing: { ...outcome.existing, response } };
  }

  override async claimIn(
    ...args: Parameters<ForwardingClaimStore['claimIn']>
  ): Promise<ClaimInOutcome> {
    const outcome = await super.claimIn(...args);
    if (outcome.kind !== 'existing' || outcome.existing.state !== 'done') return outcome;
    const response = await this.replayed(args[0], outcome.existing.response);
    return { kind: 'existing', existing: { ...outcome.existing, response } };
  }

  override async finish(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    return this.inner.finish(claim, await this.stored(claim, response));
  }

  override async completeAnswer(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    return super.completeAnswer(claim, await this.stored(claim, response));
  }

  override async finishIn(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction: StoreTransaction,
  ): Promise<boolean> {
    const kept = await this.stored(claim, response, transaction);
    return this.transactionalInner().finishIn(claim, kept, transaction);
  }
}
