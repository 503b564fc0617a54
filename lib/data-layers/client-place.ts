import { transactionControlOf } from '../transaction/sql/sql-text.js';

/**
 * What a client of the joined pool is, as the place of its statements depends on it:
 * - `connection`: a connection of its own, taken outside every request and phase (an app's
 *   "dedicated" client from `onModuleInit`, a background job's, a `LISTEN` client) or in a scope
 *   that joined nothing then (a guard, a route that is not atomic, work left past a commit);
 * - `left`: a connection of its own taken in `IdempotentTransaction.outside()`, the documented
 *   way to say "this work is not the request's";
 * - `view`: a view of a request's or phase's connection (`pool.connect()` in its scope);
 * - `view-in-transaction`: such a view with a transaction of its code's open on it (`BEGIN`);
 * - `view-left-open`: such a view whose scope ended with that transaction open, however it
 *   ended (refused at its commit: a client kept across requests, its `BEGIN` in one, its
 *   `COMMIT` meant for a later one; or rolled back: its handler threw, its lease was lost, a
 *   503): the transaction went with the scope, and nothing more can run in it; a `ROLLBACK`
 *   on it ends it there, and the view is a plain one again (`endsLeftOpen`);
 * - `view-apart`: such a view used past its scope's end, now a connection of its own.
 */
export type ClientHeld =
  'connection' | 'left' | 'view' | 'view-in-transaction' | 'view-left-open' | 'view-apart';

/**
 * What a view of a scope's connection is (see `ClientHeld`): used past its scope's end
 * (`apart`), or with `depth` transactions of its code's open on it (`BEGIN`, then savepoints),
 * its scope ended or not. Once the scope ended, whatever the end, a transaction still open on
 * the view is gone: a scope cannot commit with one open (`NestedTransactionOpenAtCommitError`),
 * and any other end rolls it back. A `COMMIT` sent on it then commits nothing and is told so
 * (`KeptClientTransactionGoneError`), never that its writes "stay in" a transaction that is no
 * more (reviewer, round 107).
 */
export function heldView(apart: boolean, depth: number, scopeEnded: boolean): ClientHeld {
  if (apart) return 'view-apart';
  if (depth === 0) return 'view';
  return scopeEnded ? 'view-left-open' : 'view-in-transaction';
}

/**
 * Whether a statement ends, on a client, the transaction its code left open when its scope
 * ended (`view-left-open`): a `ROLLBACK` or `ABORT` alone (`control`, as `nestedControlOf`
 * names a statement's transaction control: `rollback`), whichever scope sends it, or none.
 * That transaction went with its scope; a `ROLLBACK` asks for no more than that, leaves
 * nothing of the sender's behind, and is what node-postgres code sends to leave a failed one
 * (`await client.query('ROLLBACK').catch(…)` before its next `BEGIN`). So it is answered as
 * done, nothing sent, and the view is a plain `view` again (its depth 0), which joins the scope
 * it is used in; refused, it left the client refused in every later request, for ever
 * (adversary 108). Anything else on it stays refused in an open request (`placeOfClient`).
 */
export function endsLeftOpen(held: ClientHeld, control: string | undefined): boolean {
  return held === 'view-left-open' && control === 'rollback';
}

/**
 * The scope a statement on it is sent from, as it stands to the client:
 * - `home`: the scope a view was taken in (its handler or phase, work it left running, its own
 *   `outside()`); never said of a connection of its own (see `placeOfClient`);
 * - `none`: no transaction scope (a timer, a listener, a request without `@Idempotent()`);
 * - `open`: a request's or phase's transaction, open, that joins the pool;
 * - `ended`: another request's or phase's transaction that has ended (work it left running);
 * - `elsewhere`: a scope that joins nothing on the pool (`outside()`, a route not atomic).
 */
export type StatementScope = 'home' | 'none' | 'open' | 'ended' | 'elsewhere';

/**
 * Where that statement runs:
 * - `own`: where the client belongs (its own connection; a view's scope's transaction, or past
 *   its end as that scope decides), as without the library;
 * - `join`: in the transaction of the scope it is sent from, through a view of that one's;
 * - `refuse`: nowhere (`ClientTakenElsewhereError`), the scope's transaction rolled back.
 */
export type ClientPlace = 'own' | 'join' | 'refuse';

/**
 * A statement belongs to the scope in whose async context it is sent (docs/guides/
 * data-layers.md), not to the one its client was taken in. A connection taken before the
 * request would commit its writes apart from it, and the retry after a passing failure would
 * write them again (adversary 103): its session is its own, so it cannot be placed in the
 * request either, and it is refused, as TypeORM's runner connected outside the request is.
 * A view kept from another request or phase (`this.client ??= await pool.connect()`) joins the
 * scope it is used in, as TypeORM's kept runner does: run in its first scope's transaction, a
 * later request's write rolled back with that one (or committed apart once it had ended). A
 * view whose code began a transaction on it stays in it.
 * Outside every request nothing changes (a `LISTEN` client, a job's client).
 */
export function placeOfClient(held: ClientHeld, scope: StatementScope): ClientPlace {
  if (scope === 'home' || scope === 'none') return 'own';
  switch (held) {
    case 'left':
      // Taken in `outside()` on purpose: the app's own connection, wherever it is used.
      return 'own';
    case 'connection':
    case 'view-apart':
      // Its writes would commit apart from the request: refused there; elsewhere as always.
      return scope === 'open' ? 'refuse' : 'own';
    case 'view':
      // Another request's left work (`ended`) joins it too: that one's end decides, as for
      // its own `pool.query()` there. A scope that joins nothing cannot take it.
      return scope === 'elsewhere' ? 'refuse' : 'join';
    case 'view-in-transaction':
      // A transaction its code began is its own, and ends as its code says (as TypeORM's
      // runner with one open): a data layer's engine may send its statements from whichever
      // request's context runs its queue (Prisma's), and they are that transaction's.
      return 'own';
    case 'view-left-open':
      // Its transaction went with the scope that took it (refused at that end): said to an open
      // request by a refusal of its own, which names the pattern, not as a bare 500 there
      // (adversary 104); elsewhere as before (`TransactionEndedError`), as nothing joins there.
      return scope === 'open' ? 'refuse' : 'own';
  }
}

/**
 * Whether a `COMMIT` (or another statement that ends a transaction with a commit: `END`,
 * `COMMIT AND CHAIN`, `PREPARE TRANSACTION`) on a client, sent from a scope, is refused before
 * it is sent (`KeptClientCommittedElsewhereError`): one on a view with a transaction of its
 * code open, sent from any scope but the view's own. That view stays in its scope's
 * transaction (see `placeOfClient`), so such a `COMMIT` would only release a savepoint there:
 * the writes it meant to make durable would commit or roll back with the scope that took the
 * client, whatever the sender answered (adversary 104: a batch client kept across requests,
 * `BEGIN` in A, `COMMIT` in B; adversary 106: from a plain route, a route that is not atomic,
 * another request's `outside()`, or a B refused for an A that committed later). Waiting for
 * that scope's outcome cannot be exact (it may outlast any wait, and a sender outside every
 * request has no answer to hold back); the refusal is, whatever the timing: the sender is
 * told its `COMMIT` failed, so nothing it answers "done" is lost. Only a commit: a data
 * layer's engine may send the other statements of its transaction from any request's context
 * (see `placeOfClient`), never its `COMMIT`, which its caller sends (Prisma's transaction
 * manager, awaited by `$transaction` in the caller's context); a `ROLLBACK` leaves nothing of
 * the sender's behind, wherever it comes from.
 */
export function refusesCommitFrom(held: ClientHeld, scope: StatementScope): boolean {
  return held === 'view-in-transaction' && scope !== 'home';
}

/** What ends a transaction with a commit, as `transactionControlOf` names it. */
const COMMITS = new Set(['COMMIT', 'END', 'PREPARE TRANSACTION']);

/**
 * Whether a statement's text ends a transaction with a commit: `COMMIT`, `END`,
 * `COMMIT AND CHAIN`, `PREPARE TRANSACTION`, alone or among other statements (its first
 * transaction control decides: after a `ROLLBACK` nothing is left to commit).
 */
export function endsWithCommit(sql: unknown): boolean {
  const control = transactionControlOf(sql);
  return control !== undefined && COMMITS.has(control);
}
