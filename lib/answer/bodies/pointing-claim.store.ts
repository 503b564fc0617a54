import { Logger } from '@nestjs/common';
import { type ActiveClaim } from '../../shapes/active-claim.js';
import { IdempotencyStoredResponseUnreadableError } from '../../shapes/idempotency.errors.js';
import { type StoredResponse } from '../../shapes/stored-response.js';
import { type StoreTransaction } from '../../shapes/store-transaction.js';
import { type ClaimStore, type KeyScope } from '../../shapes/claim-store.interface.js';
import { ResponseLayer } from '../response-layer.js';
import {
  bodyProblem,
  pointerOf,
  sha256Hex,
  storedByPointer,
  withBody,
  withPointer,
} from './body-pointer.js';
import { type ResponseBodyStore } from '../../shapes/response-body-store.interface.js';

/**
 * Large responses by pointer, on any claim store: a body over `overBytes` goes to the body
 * store, and the key keeps its id, length and SHA-256. The body is written in the finish's
 * transaction when both can share it, before the finish otherwise (see `ResponseBodyStore`);
 * a replay checks what it fetched against the pointer, and answers a 500 naming the reason
 * rather than a wrong body.
 */
export class PointingClaimStore extends ResponseLayer {
  private readonly logger = new Logger('Idempotency');

  constructor(
    inner: ClaimStore,
    private readonly bodies: ResponseBodyStore,
    private readonly overBytes: number,
  ) {
    super(inner);
  }

  protected async stored(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction?: StoreTransaction,
  ): Promise<StoredResponse> {
    if (!storedByPointer(response, this.overBytes)) return response;
    // A key its store expires on its own (Redis) keeps no row for the body purge to look at:
    // its body is kept as long as the key may live, from a finish within the claim's lease.
    const expiresOnItsOwn = this.inner.expiresKeysAfterMs;
    const keepMs = expiresOnItsOwn === undefined ? undefined : expiresOnItsOwn + claim.leaseMs;
    const id = await this.bodies.put(claim, response.body, {
      transaction: this.bodies.transactional ? transaction : undefined,
      keepMs,
    });
    return withPointer(response, {
      id,
      length: response.body.length,
      sha256: sha256Hex(response.body),
    });
  }

  protected async replayed(scope: KeyScope, kept: StoredResponse): Promise<StoredResponse> {
    const pointer = pointerOf(kept);
    if (pointer === undefined) return kept;
    let problem = 'its body pointer is malformed';
    if (pointer !== 'malformed') {
      // One copy of the body in memory: fetched once, hashed in place, sent as it is.
      const body = await this.bodies.get(pointer.id);
      const found = bodyProblem(pointer, body);
      if (found === undefined) return withBody(kept, body!);
      problem = found;
    }
    this.logger.error(`stored response of key ${scope.key}: ${problem}`);
    throw new IdempotencyStoredResponseUnreadableError(problem);
  }
}
