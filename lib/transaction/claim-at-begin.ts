/**
 * The statements a transaction that opens with the key's claim sends in its first round trip
 * (`RequestTransaction.beginWithClaim`), around the store's claim.
 */

/** The savepoint the claim is kept under: a handler's error rolls back to it (see `undoEffects`). */
export const CLAIMED_SAVEPOINT = 'idempotency_claimed';

/**
 * The claim bounded by `waitMs` on a row another request inserted and has not committed (a
 * duplicate of a request whose claim commits with its work): `lock_timeout` for the claim
 * alone, the session's own put back after it, so the handler's statements run with the
 * timeout they would have without the library. A claim that waits longer fails with 55P03
 * and the transaction is rolled back.
 */
export function claimWaitBounded(claim: string, waitMs: number): string[] {
  // `claim` may be several statements (a lock, then the claim): the last one answers.
  return [
    "SELECT set_config('idempotency.lock_timeout', current_setting('lock_timeout'), true)",
    `SET LOCAL lock_timeout = ${Math.max(1, Math.floor(waitMs))}`,
    claim,
    "SELECT set_config('lock_timeout', current_setting('idempotency.lock_timeout'), true)",
  ];
}

/**
 * The transaction's own `idle_in_transaction_session_timeout`: its claim is seen by no one and
 * has no lease anyone can take over, so a worker gone without a word (its host lost, no FIN)
 * would hold the key until TCP noticed, hours later. Idle this long (the lease), PostgreSQL
 * ends the session and the claim goes with it; a live worker's heartbeat renews inside the
 * transaction every third of it. It also stands for the database's own timeout, were that
 * shorter: the claim's transaction idles while the handler works before its first statement.
 */
export function idleBound(idleMs: number): string {
  return `SET LOCAL idle_in_transaction_session_timeout = ${Math.max(1, Math.floor(idleMs))}`;
}

/**
 * Where the claim's result is among the round trip's: before the lock timeout put back, the
 * idle bound and the savepoint (the claim may be several statements, its last one answering).
 */
export function claimResult<T>(results: T[]): T {
  return results[results.length - 4];
}
