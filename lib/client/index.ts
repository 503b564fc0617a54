// The client side, `nestjs-idempotency-pg/client`: dependency-free, for Node.js and browsers.
// The file store for Node.js is `nestjs-idempotency-pg/client/file-store`.
export {
  idempotentFetch,
  IdempotentRequestError,
  type IdempotentFetchOptions,
} from './idempotent-fetch.js';
export { MemoryOperationStore, type PendingOperationStore } from './operation-store.js';
export { nextDelayMs, outcomeOf, retryAfterMs, type AttemptOutcome } from './retry-policy.js';
