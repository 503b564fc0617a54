import { Logger } from '@nestjs/common';
import { type ExistingKey } from '../decide.js';
import { type ActiveClaim } from '../idempotency-context.js';
import { IdempotencyStoredResponseUnreadableError } from '../idempotency.errors.js';
import { type StoredResponse } from '../stored-response.js';
import { type LazyTransaction } from '../transaction/lazy-transaction.js';
import { type ClaimOutcome, type ClaimStore, type KeyScope } from './claim-store.interface.js';
import { ForwardingClaimStore } from './forwarding-claim.store.js';
import { type ResponseSealer, SEALED_MARKER, SealedResponseError } from './response-sealer.js';

/**
 * Encryption at rest for any claim store: responses are sealed on their way in and opened on
 * their way out, so that a store never sees a plain body. A sealed response that cannot be
 * opened (no keys configured, an unknown key id, a tampered body) is a 500 with the reason,
 * never a wrong body. Without keys it still refuses to replay a sealed response as plain.
 */
export class SealingClaimStore extends ForwardingClaimStore {
  private readonly logger = new Logger('Idempotency');

  constructor(
    inner: ClaimStore,
    private readonly sealer: ResponseSealer | undefined,
  ) {
    super(inner);
  }

  override async claim(
    scope: KeyScope,
    fingerprint: Buffer,
    leaseMs: number,
  ): Promise<ClaimOutcome> {
    const outcome = await this.inner.claim(scope, fingerprint, leaseMs);
    if (outcome.kind === 'claimed') return outcome;
    return { kind: 'existing', existing: this.opened(scope, outcome.existing) };
  }

  override finish(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    return this.inner.finish(claim, this.sealed(claim, response));
  }

  override finishIn(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction: LazyTransaction,
  ): Promise<boolean> {
    return this.transactionalInner().finishIn(claim, this.sealed(claim, response), transaction);
  }

  private sealed(claim: ActiveClaim, response: StoredResponse): StoredResponse {
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
