import { type ActiveClaim } from './active-claim.js';
import { type StoreTransaction } from './store-transaction.js';

/** How a body is written and how long it must be kept. */
export interface BodyPlacement {
  /** The request's transaction, when the body is to commit with the finish. */
  transaction?: StoreTransaction;
  /**
   * Set when the key lives in a claim store that expires keys on its own (Redis): the body
   * must be kept at least this long. Unset, the key is a row of `idempotency_keys`, and the
   * body goes when that row has gone.
   */
  keepMs?: number;
}

/**
 * Where large response bodies live when they are stored by pointer (`largeResponses`). The
 * claim store keeps the pointer (the id `put` returns), the body's length and its SHA-256.
 *
 * When the body is written, relative to the finish:
 * - given the request's `transaction` (a store in the app's PostgreSQL, like the one shipped),
 *   `put` writes in it, so that the body commits with the finish or not at all: a finished
 *   key never points at nothing;
 * - otherwise (an object store, or a finish outside the request's transaction) `put` writes
 *   on its own before the finish: a finish that then fails leaves a body no key points at,
 *   which `purgeBatch` (or the object store's lifecycle rule) removes later; never the
 *   reverse.
 *
 * A replay whose body is missing, or whose length or SHA-256 differs, is a 500 that says so,
 * never a wrong body.
 */
export interface ResponseBodyStore {
  /** Whether `put` can write in the request's PostgreSQL transaction. */
  readonly transactional: boolean;
  /** Stores `body` for the key `claim` finishes; returns its id. */
  put(claim: ActiveClaim, body: Buffer, placement?: BodyPlacement): Promise<string>;
  /** The body of that id, or undefined when there is none. */
  get(id: string): Promise<Buffer | undefined>;
  /**
   * Deletes up to `batchSize` bodies whose key is gone (purged, or its finish failed), older
   * than `retentionMs`; returns how many went. An object store with a lifecycle rule of its
   * own may return 0.
   */
  purgeBatch(retentionMs: number, batchSize: number): Promise<number>;
}
