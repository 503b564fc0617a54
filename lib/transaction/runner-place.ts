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
 * - `join-with-session`: in the scope's transaction, as `join`, with the session its code set up
 *   on its own connection (role, search path, settings) carried in as `SET LOCAL`, and that
 *   connection given back at its `release()` (`carryingSession`);
 * - `itself-after-end`: on the runner itself, its session with it, once the end's outcome is
 *   known (`afterItsEnd`): if the request committed; refused (`TransactionEndedError`) if it
 *   rolled back.
 */
export type RunnerPlace =
  'itself' | 'join' | 'after-end' | 'join-with-session' | 'itself-after-end';

/**
 * A statement belongs to the request in whose async context it is sent (docs/guides/
 * transactions.md), not to the place its runner was made: a unit of work made before the
 * handler writes in the request's transaction, or a failed try's row commits on its own and its
 * retry writes it again (adversary 88, 90). What its code made its own stays its own: a
 * transaction it began, and a connection it took, whose session (a tenant's search path, a role)
 * the request's connection does not have, and which only the runner's own `release()` gives
 * back (adversary 90: the row landed in another schema's table; a connection leaked per request).
 */
export function placeOfRunner(held: RunnerHeld, scope: RunnerScope): RunnerPlace {
  // A transaction its code began is its own, and commits as its code says.
  if (held === 'own-transaction') return 'itself';
  // Its session joins the request with it: on its own connection, its writes would commit apart
  // from the request, and its retry would write them again (adversary 90 guard search path).
  // Past the end, work left running writes on it, with its session, only once the request
  // committed. Elsewhere it stays itself, its session with it.
  if (held === 'connected') {
    if (scope === 'open') return 'join-with-session';
    return scope === 'ended' ? 'itself-after-end' : 'itself';
  }
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
