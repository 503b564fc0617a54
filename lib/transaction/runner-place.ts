/**
 * What a runner made outside the transaction it is used in (outside every scope: a
 * `Scope.REQUEST` unit of work; or inside `@Idempotent()` before its handler started: an
 * interceptor of the app's written above it) holds of its own when it is used:
 * - `plain`: nothing (made, not connected): its code has no session of its own yet;
 * - `own-transaction`: a transaction its code began on it (outside the scope);
 * - `connected`: its own connection, taken outside the scope (a guard's read, or its `SET
 *   search_path` for the tenant), whose session its code may have set up.
 */
export type RunnerHeld = 'plain' | 'own-transaction' | 'connected';

/**
 * The transaction of the scope it is used in, as it stands to the runner's DataSource:
 * - `none`: no scope at all;
 * - `open`: open, and code in its scope joins it;
 * - `ended`: its request ended (committed, rolled back, or ending): work it left running;
 * - `later`: not joinable yet (its handler has not started: a pipe's, an interceptor's work);
 * - `apart`: one that code does not join (another DataSource, a route that is not atomic).
 */
export type RunnerScope = 'none' | 'open' | 'ended' | 'later' | 'apart';

/**
 * Where its statement runs now:
 * - `itself`: on the runner itself, as without the library;
 * - `join`: in the scope's transaction, through a view of it (`openRunner`);
 * - `after-end`: as a view of the ended transaction runs (`runnerPastEnd`): it waits for the
 *   end's outcome, then runs apart (a connection of its own) if the request committed, and is
 *   refused (`TransactionEndedError`) if it rolled back: the retry runs that work again;
 * - `refuse`: nowhere: every statement of it (a query, a stream, a manager's helper, a
 *   transaction's start) is refused (`RunnerConnectedOutsideRequestError`); only its
 *   `release()` runs, on itself, and gives its own connection back to the pool.
 */
export type RunnerPlace = 'itself' | 'join' | 'after-end' | 'refuse';

/**
 * A statement belongs to the request in whose async context it is sent (docs/guides/
 * transactions.md), not to the place its runner was made: a unit of work made before the
 * handler writes in the request's transaction, or a failed try's row commits on its own and its
 * retry writes it again (adversary 88, 90). A transaction its code began stays its own. A
 * connection it took before (a guard's, its session set up there: a tenant's search path, a
 * custom setting) cannot be placed in the request without changing what its statements mean
 * (adversary 90, 96): its statements in the request are refused, and only its own `release()`
 * runs, giving that connection back.
 */
export function placeOfRunner(held: RunnerHeld, scope: RunnerScope): RunnerPlace {
  // A transaction its code began is its own, and commits as its code says.
  if (held === 'own-transaction') return 'itself';
  // Connected before the request's transaction could take its statements (a guard's `SET
  // search_path`, its `set_config('app.tenant', …, false)`), its session is its connection's.
  // On that connection its writes would commit apart from the request, and its retry would
  // write them again (adversary 90); in the request's transaction its session is not there, and
  // carried in (`SET LOCAL`) it misses custom settings, is bypassed by helpers, leaks to the
  // request's other statements, and holds two connections per request (adversary 96). No place
  // keeps its meaning: refused, in the open request and in work left running past its end.
  // Elsewhere (the guard itself, a scope that joins nothing) it stays itself, as always.
  if (held === 'connected') return scope === 'open' || scope === 'ended' ? 'refuse' : 'itself';
  switch (scope) {
    case 'open':
      return 'join';
    case 'ended':
      // Work its request left running (a timer, a listener not awaited), first used after the
      // end: as one made in the scope is (adversary 90: a failed try's late row committed on its
      // own, and the retry wrote it again).
      return 'after-end';
    case 'none':
    case 'later':
    case 'apart':
      // Asked again at its next use: once the handler started, it joins.
      return 'itself';
  }
}
