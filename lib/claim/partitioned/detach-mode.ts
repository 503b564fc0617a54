import { type PoolerMode } from '../../shapes/idempotency-options.interface.js';

/**
 * How the purge detaches partitions: `concurrently`, on one session (claims go on meanwhile),
 * or `locked`, each partition in a transaction of its own under the table's lock (a short
 * wait for claims, bounded by a lock timeout).
 *
 * Locked:
 * - behind a pooler in transaction mode (`CONCURRENTLY` runs outside any transaction, and a
 *   session's locks and settings would stay behind on a server session others then get);
 * - on a table with a DEFAULT partition, which PostgreSQL detaches nothing `CONCURRENTLY` from
 *   (adversary 108: the start-up check refuses one; an operator may add it to a running app);
 * - while another role's partition has a detach left pending (an interrupted purge of a role
 *   whose partitions this one may not drop, adversary 113): PostgreSQL refuses a `CONCURRENTLY`
 *   detach of any partition while one of the table's is pending detach, and this role may
 *   finish that detach (`FINALIZE` asks only for the keys table's ownership) but not drop the
 *   table, which would then lie outside the partitions for good. So it is left to its owner,
 *   and the role's own expired partitions are detached plainly, which PostgreSQL allows beside
 *   a pending one, rather than none at all. A pending detach this role may drop is finished
 *   first by the purge itself (`expirySteps`), so it never gets here.
 */
export type DetachMode = 'concurrently' | 'locked';

export function detachMode(
  pooler: PoolerMode,
  hasDefaultPartition: boolean,
  otherRolesDetachPending: boolean,
): DetachMode {
  return pooler === 'transaction' || hasDefaultPartition || otherRolesDetachPending
    ? 'locked'
    : 'concurrently';
}
