import { Logger } from '@nestjs/common';
import { type ActiveClaim } from '../shapes/active-claim.js';
import { IdempotencyStoredResponseUnreadableError } from '../shapes/idempotency.errors.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type ClaimStore, type KeyScope } from '../shapes/claim-store.interface.js';
import { ResponseLayer } from './response-layer.js';
import { type ResponseSealer, SEALED_MARKER, SealedResponseError } from './response-sealer.js';

/**
 * Encryption at rest for any claim store: responses are sealed on their way in and opened on
 * their way out, so that a store never sees a plain body. A sealed response that cannot be
 * opened (no keys configured, an unknown key id, a tampered body) is a 500 with the reason,
 * never a wrong body. Without keys it still refuses to replay a sealed response as plain.
 */
export class SealingClaimStore extends ResponseLayer {
  private readonly logger = new Logger('Idempotency');

  constructor(
    inner: ClaimStore,
    private readonly sealer: ResponseSealer | undefined,
  ) {
    super(inner);
  }

  protected stored(claim: ActiveClaim, response: StoredResponse): StoredResponse {
    return this.sealer ? this.sealer.seal(claim, response) : response;
  }

  /** A finished key's response as it went out: opened, if it was stored sealed. */
  protected replayed(scope: KeyScope, kept: StoredResponse): StoredResponse {
    const sealed = SEALED_MARKER in kept.headers;
    if (!this.sealer && !sealed) return kept;
    try {
      if (!this.sealer) {
        throw new SealedResponseError(
          'the stored response is sealed, and no encryption keys are configured',
        );
      }
      return this.sealer.open(scope, kept);
    } catch (error) {
      if (!(error instanceof SealedResponseError)) throw error;
      const detail = error.detail ? ` (${error.detail})` : '';
      this.logger.error(`stored response of key ${scope.key}: ${error.message}${detail}`);
      throw new IdempotencyStoredResponseUnreadableError(error.message);
    }
  }
}
