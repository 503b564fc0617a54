/**
 * What the start-up check (`routes/`) knows of a route's claim store, as `ClaimStores` makes
 * it: a shape both sides share, so it sits here and imports nothing of ours.
 */
export interface RouteClaimStore {
  /** The name the route (or the module) gave. */
  name: string;
  /** Every store name the module knows, for the message. */
  known: readonly string[];
  /** Whether the store commits in the app's transaction; undefined when it is unknown. */
  transactional?: boolean;
  /** The route's resolved `atomic`. */
  atomic: boolean;
  /** The route's resolved `oneCommit`. */
  oneCommit?: boolean;
}
