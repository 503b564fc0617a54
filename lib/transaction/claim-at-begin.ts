import { type ClaimInText } from '../shapes/store-transaction.js';
export { type ClaimInText } from '../shapes/store-transaction.js';
/**
 * The statements a transaction that opens with the key's claim sends in its first round trip
 * (`RequestTransaction.beginWithClaim`), around the store's claim.
 */

/**
 * The connections whose session has prepared a claim statement by its SQL name (`PREPARE`):
 * a statement written whole in the round trip's text is parsed and planned for every request
 * (about twice the server's time of the rest of the request, measured), where `EXECUTE` of one
 * prepared in the session reuses its plan. Kept per connection object, as node-postgres keeps
 * its own named statements: a session ends with its connection.
 */
const preparedIn = new WeakMap<object, Set<string>>();

/** The SQL name of a claim statement prepared in a session: apart from the protocol's names. */
function sqlName(claim: ClaimInText): string {
  return `${claim.name}_in_text`;
}

/**
 * The claim as statements of the round trip's text: `EXECUTE` of the session's prepared one,
 * prepared first where the session has not (`named`: the connection keeps a session's
 * statements; behind a pooler in transaction mode it does not, and the claim is written whole).
 */
export function claimStatements(connection: object, claim: ClaimInText, named: boolean): string[] {
  if (!named) return [claim.text.replace(/\$(\d+)/g, (_, n: string) => claim.args[Number(n) - 1])];
  const execute = `EXECUTE ${sqlName(claim)}(${claim.args.join(', ')})`;
  if (preparedIn.get(connection)?.has(sqlName(claim))) return [execute];
  return [`PREPARE ${sqlName(claim)} AS ${claim.text}`, execute];
}

/** Notes that the session of `connection` has the claim prepared (its round trip went through). */
export function notePrepared(connection: object, claim: ClaimInText): void {
  const names = preparedIn.get(connection) ?? new Set<string>();
  preparedIn.set(connection, names);
  names.add(sqlName(claim));
}

/**
 * What a round trip that failed says of the session's prepared claim, and what to send before
 * it is sent again (once), after its transaction: 26000, it is not there (the session was
 * reset): rolled back, to be prepared again; 42P05, it is there though not known here (another
 * copy of the library on the pool): rolled back, to be executed; 0A000, its plan no longer
 * fits the table (a migration changed a column it returns: "cached plan must not change result
 * type"): rolled back and dropped, to be prepared anew, or every request on the connection
 * would fail alike for as long as it lives. Otherwise `undefined`: the failure is the claim's.
 */
export function recoveryOf(
  connection: object,
  claim: ClaimInText,
  error: unknown,
): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  const names = preparedIn.get(connection) ?? new Set<string>();
  preparedIn.set(connection, names);
  if (code === '42P05') {
    names.add(sqlName(claim));
    return 'ROLLBACK';
  }
  if (code === '26000') {
    names.delete(sqlName(claim));
    return 'ROLLBACK';
  }
  if (code === '0A000' && names.has(sqlName(claim))) {
    names.delete(sqlName(claim));
    return `ROLLBACK; DEALLOCATE ${sqlName(claim)}`;
  }
  return undefined;
}

/** The savepoint the claim is kept under: a handler's error rolls back to it (see `undoEffects`). */
export const CLAIMED_SAVEPOINT = 'idempotency_claimed';

/**
 * The claim bounded by `waitMs` on a row another request inserted and has not committed (a
 * duplicate of a request whose claim commits with its work): `lock_timeout` for the key's lock
 * and the claim (the statements before it), and the session's own put back after them (the
 * statement after), so that the handler's statements run with the timeout they would have
 * without the library. A claim that waits longer fails with 55P03 and the transaction is
 * rolled back.
 */
export function claimWaitBounded(waitMs: number): [before: string[], after: string] {
  return [
    [
      "SELECT set_config('idempotency.lock_timeout', current_setting('lock_timeout'), true)",
      `SET LOCAL lock_timeout = ${Math.max(1, Math.floor(waitMs))}`,
    ],
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
