import { type Logger } from '@nestjs/common';
import { type ActiveClaim } from './active-claim.js';
import { type ClaimStore, isTransactional } from './claim-store.interface.js';
import { type RequestTransaction } from '../transaction/request-transaction.js';

/**
 * The heartbeats of the claims this process holds, and the release that waits for them. Each
 * claim's lease renewal on its way is kept: a release waits for it, or a renewal that lands
 * after the key was given back would hold it again, and the retry would get 409s.
 */
export class LeaseRenewals {
  private readonly renewals = new WeakMap<ActiveClaim, Promise<unknown>>();

  constructor(private readonly logger: Logger) {}

  /**
   * Extends the lease while the handler runs, so that a short lease (a fast takeover after a
   * real crash) does not hand a slow but live worker's key to another one. Returns the stop.
   */
  heartbeat(store: ClaimStore, claim: ActiveClaim, transaction?: RequestTransaction): () => void {
    // A transaction above READ COMMITTED begins only once the renewal on its way has landed,
    // and then takes the renewals in (see `RequestTransaction.beforeIsolatedBegin`).
    if (transaction) transaction.beforeIsolatedBegin = () => this.landed(claim);
    const timer = setInterval(
      () => {
        const inside =
          transaction?.isolated && isTransactional(store) && store.extendLeaseIn
            ? store.extendLeaseIn(claim, transaction)
            : undefined;
        const renewal = (inside ?? store.extendLease(claim)).then(
          (held) => {
            if (!held) clearInterval(timer);
          },
          (error: unknown) =>
            this.logger.warn(`heartbeat of key ${claim.key} failed: ${String(error)}`),
        );
        this.renewals.set(claim, renewal);
      },
      Math.max(50, Math.floor(claim.leaseMs / 3)),
    );
    timer.unref();
    return () => clearInterval(timer);
  }

  /** Once the claim's renewal on its way (if any) has landed. */
  landed(claim: ActiveClaim): Promise<unknown> {
    return this.renewals.get(claim) ?? Promise.resolve();
  }

  /** Gives the key back once its renewal on its way has landed; a failure is only logged. */
  async release(store: ClaimStore, claim: ActiveClaim, forget: boolean): Promise<void> {
    await this.renewals.get(claim);
    return store.release(claim, forget).catch((releaseError: unknown) => {
      // The lease then simply runs out, and a retry takes the key over.
      this.logger.warn(`could not release key ${claim.key}: ${String(releaseError)}`);
    });
  }
}
