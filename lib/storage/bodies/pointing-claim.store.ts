import { Logger } from '@nestjs/common';
import { type ExistingKey } from '../../decide.js';
import { type ActiveClaim } from '../../idempotency-context.js';
import { IdempotencyStoredResponseUnreadableError } from '../../idempotency.errors.js';
import { type StoredResponse } from '../../stored-response.js';
import { type LazyTransaction } from '../../transaction/lazy-transaction.js';
import { type ClaimOutcome, type ClaimStore, type KeyScope } from '../claim-store.interface.js';
import { ForwardingClaimStore } from '../forwarding-claim.store.js';
import {
  bodyProblem,
  pointerOf,
  sha256Hex,
  storedByPointer,
  withBody,
  withPointer,
} from './body-pointer.js';
import { type BodyPlacement, type ResponseBodyStore } from './response-body-store.interface.js';

/**
 * Large responses by pointer, on any claim store: a body over `overBytes` goes to the body
 * store, and the key keeps its id, length and SHA-256. The body is written in the finish's
 * transaction when both can share it, before the finish otherwise (see `ResponseBodyStore`);
 * a replay checks what it fetched against the pointer, and answers a 500 naming the reason
 * rather than a wrong body.
 */
export class PointingClaimStore extends ForwardingClaimStore {
  private readonly logger = new Logger('Idempotency');

  constructor(
    inner: ClaimStore,
    private readonly bodies: ResponseBodyStore,
    private readonly overBytes: number,
  ) {
    super(inner);
  }

  override async claim(
    scope: KeyScope,
    fingerprint: Buffer,
    leaseMs: number,
  ): Promise<ClaimOutcome> {
    const outcome = await this.inner.claim(scope, fingerprint, leaseMs);
    if (outcome.kind === 'claimed' || outcome.existing.state !== 'done') return outcome;
    return { kind: 'existing', existing: await this.resolved(scope, outcome.existing) };
  }

  override async finish(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    return this.inner.finish(claim, await this.pointed(claim, response, {}));
  }

  override async finishIn(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction: LazyTransaction,
  ): Promise<boolean> {
    const shared = this.bodies.transactional ? transaction : undefined;
    const stored = await this.pointed(claim, response, { transaction: shared });
    return this.transactionalInner().finishIn(claim, stored, transaction);
  }

  private async pointed(
    claim: ActiveClaim,
    response: StoredResponse,
    placement: BodyPlacement,
  ): Promise<StoredResponse> {
    if (!storedByPointer(response, this.overBytes)) return response;
    // A key its store expires on its own (Redis) keeps no row for the body purge to look at:
    // its body is kept as long as the key may live, from a finish within the claim's lease.
    const expiresOnItsOwn = this.inner.expiresKeysAfterMs;
    const keepMs = expiresOnItsOwn === undefined ? undefined : expiresOnItsOwn + claim.leaseMs;
    const id = await this.bodies.put(claim, response.body, { ...placement, keepMs });
    return withPointer(response, {
      id,
      length: response.body.length,
      sha256: sha256Hex(response.body),
    });
  }

  private async resolved(
    scope: KeyScope,
    existing: Extract<ExistingKey, { state: 'done' }>,
  ): Promise<ExistingKey> {
    const pointer = pointerOf(existing.response);
    if (pointer === undefined) return existing;
    let problem = 'its body pointer is malformed';
    if (pointer !== 'malformed') {
      // One copy of the body in memory: fetched once, hashed in place, sent as it is.
      const body = await this.bodies.get(pointer.id);
      const found = bodyProblem(pointer, body);
      if (found === undefined) return { ...existing, response: withBody(existing.response, body!) };
      problem = found;
    }
    this.logger.error(`stored response of key ${scope.key}: ${problem}`);
    throw new IdempotencyStoredResponseUnreadableError(problem);
  }
}
