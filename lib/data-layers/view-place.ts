/**
 * The scope a statement of a view of a request's runner is sent from, as it stands to the
 * request the view was made in (its home):
 * - `home`: the home request's own scope (its handler, work it left running);
 * - `none`: no transaction scope at all (a request without `@Idempotent()`, a module's timer);
 * - `joins`: another open transaction on the same DataSource that its code's runners join
 *   (a later or concurrent request, a phase);
 * - `ended-request`: another request's scope whose transaction has ended (work it left
 *   running);
 * - `apart`: a scope that joins nothing (`IdempotentTransaction.outside()`, a transaction on
 *   another DataSource or one its code does not join).
 */
export type ScopeOfUse = 'home' | 'none' | 'joins' | 'ended-request' | 'apart';

/**
 * Where that statement runs:
 * - `home`: as the home request decides (in its transaction, or, past its end, apart once it
 *   committed and refused after a rollback);
 * - `join`: in the transaction of the scope it is sent from, through a view of that one's;
 * - `after-its-end`: as work that other request left running (apart once it committed,
 *   refused after its rollback);
 * - `apart`: on a connection of its own, now, as without the library.
 */
export type ViewPlace = 'home' | 'join' | 'after-its-end' | 'apart';

/**
 * A repository, manager or runner a service kept from one request (`this.repo ??=
 * tx.getRepository(…)`) and uses in a later or concurrent one: the request a statement
 * belongs to is the one in whose async context it is sent (docs/guides/data-layers.md), never
 * the one the object was made in. Run apart in another request's scope, a failed try's write
 * committed on its own and its retry wrote it again; run in its home's still-open transaction,
 * it was rolled back with that request while the other stored its 201 (adversary 88).
 */
export function placeOfView(scope: ScopeOfUse): ViewPlace {
  switch (scope) {
    case 'home':
      return 'home';
    case 'none':
      // No scope: most often its home's own code whose async context a library lost (a
      // callback-style client, a custom thenable), which must stay in its home's transaction:
      // run apart, a failed try's write would commit on its own. So as its home decides,
      // whether its home is open or ended (past its end: work it left running).
      return 'home';
    case 'joins':
      return 'join';
    case 'ended-request':
      return 'after-its-end';
    case 'apart':
      return 'apart';
  }
}
