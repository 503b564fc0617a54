import { Logger } from '@nestjs/common';
import { type EntityManager } from 'typeorm';
import { type ExistingKey, type Fence } from '../decide.js';
import { type ActiveClaim } from '../idempotency-context.js';
import { IdempotencyStoredResponseUnreadableError } from '../idempotency.errors.js';
import { type StoredResponse } from '../stored-response.js';
import { type LazyTransaction } from '../transaction/lazy-transaction.js';
import {
  type ClaimOutcome,
  type ClaimStore,
  isTransactional,
  type KeyScope,
  type TransactionalClaimStore,
} from './claim-store.interface.js';
import { type ResponseSealer, SEALED_MARKER, SealedResponseError } from './response-sealer.js';

/**
 * Encryption at rest for any claim store: responses are sealed on their way in and opened on
 * their way out, so that a store never sees a plain body. A sealed response that cannot be
 * opened (no keys configured, an unknown key id, a tampered body) is a 500 with the reason,
 * never a wrong body.
 */
export function withSealing(store: ClaimStore, sealer: ResponseSealer | undefined): ClaimStore {
  return isTransactional(store)
    ? new SealingTransactionalStore(store, sealer)
    : new SealingStore(store, sealer);
}

class SealingStore<S extends ClaimStore> implements ClaimStore {
  private readonly logger = new Logger('Idempotency');
  readonly transactional: boolean;

  constructor(
    protected readonly inner: S,
    protected readonly sealer: ResponseSealer | undefined,
  ) {
    this.transactional = inner.transactional;
  }

  async claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number): Promise<ClaimOutcome> {
    const outcome = await this.inner.claim(scope, fingerprint, leaseMs);
    if (outcome.kind === 'claimed') return outcome;
    return { kind: 'existing', existing: this.opened(scope, outcome.existing) };
  }

  takeOver(scope: KeyScope, fence: Fence, leaseMs: number) {
    return this.inner.takeOver(scope, fence, leaseMs);
  }

  finish(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    return this.inner.finish(claim, this.sealed(claim, response));
  }

  release(claim: ActiveClaim, forget: boolean): Promise<void> {
    return this.inner.release(claim, forget);
  }

  extendLease(claim: ActiveClaim): Promise<boolean> {
    return this.inner.extendLease(claim);
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

  protected sealed(claim: ActiveClaim, response: StoredResponse): StoredResponse {
    return this.sealer ? this.sealer.seal(claim, response) : response;
  }

  /** A finished key's response as it went out: opened, if it was stored sealed. */
  private opened(scope: KeyScope, existing: ExistingKey): ExistingKey {
    if (existing.state !== 'done') return existing;
    const sealed = SEALED_MARKER in existing.response.headers;
    if (!this.sealer && !sealed) return existing;
    try {
      if (!this.sealer) {
        throw new SealedResponseError(
          'the stored response is sealed, and no encryption keys are configured',
        );
      }
      return { ...existing, response: this.sealer.open(scope, existing.response) };
    } catch (error) {
      if (!(error instanceof SealedResponseError)) throw error;
      const detail = error.detail ? ` (${error.detail})` : '';
      this.logger.error(`stored response of key ${scope.key}: ${error.message}${detail}`);
      throw new IdempotencyStoredResponseUnreadableError(error.message);
    }
  }
}

class SealingTransactionalStore
  extends SealingStore<TransactionalClaimStore>
  implements TransactionalClaimStore
{
  declare readonly transactional: true;

  finishIn(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction: LazyTransaction,
  ): Promise<boolean> {
    return this.inner.finishIn(claim, this.sealed(claim, response), transaction);
  }

  commitPhase<T>(
    claim: ActiveClaim,
    phase: string,
    work: (manager: EntityManager) => Promise<T>,
  ): Promise<T> {
    return this.inner.commitPhase(claim, phase, work);
  }
}
