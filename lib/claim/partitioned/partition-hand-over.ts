/**
 * Who should own a partition of `idempotency_keys`, as a pure function of what the catalog says.
 *
 * A partition is owned by the role whose session made it, and only a member of its owner (or of
 * its schema's owner) may drop it. Left with the app role that made it, a purge run by any
 * other role (a second app role, a job logging in as a role of its own, the migrations' role)
 * may not drop it, empties it row by row instead and leaves it attached for ever: partitions
 * then pile up without bound (adversary 111). Given to the keys table's owner, it is droppable
 * by every role that may attach partitions at all (each is a member of that owner), so any
 * purge drops it.
 *
 * `ALTER TABLE ... OWNER TO` needs the session to own the partition (a member of its owner),
 * to be a member of the new owner, and the new owner to have CREATE on the partition's schema
 * (PostgreSQL's rule: no change of owner does what the new owner could not do itself). The
 * last is the one a deployment may lack (an owner given the tables by a superuser): the
 * partition then stays where it is, and the role is told what to grant.
 */

/** One partition as `PARTITION_OWNERS` lists it. */
export interface PartitionOwnership {
  /** Its name, quoted where it needs to be (`regclass` text). */
  partition: string;
  /** Its schema and owner, and the keys table's owner. */
  schema: string;
  owner: string;
  keysOwner: string;
  /** Whether this session's role has its owner's privileges (may change its owner). */
  ours: boolean;
  /** Whether this session's role is a member of the keys table's owner. */
  memberOfKeysOwner: boolean;
  /** Whether the keys table's owner has CREATE on the partition's schema. */
  keysOwnerMayCreate: boolean;
}

/** What to do about one partition not owned by the keys table's owner. */
export type HandOver =
  | { kind: 'give'; partition: string; to: string }
  | { kind: 'blocked'; partition: string; schema: string; keysOwner: string };

/**
 * The partitions this role should give to the keys table's owner (`give`), and those it would
 * give but may not, for want of the owner's CREATE on their schema (`blocked`). Another role's
 * partition is left to that role's sessions, which alone may give it.
 */
export function handOvers(partitions: readonly PartitionOwnership[]): HandOver[] {
  const steps: HandOver[] = [];
  for (const p of partitions) {
    if (p.owner === p.keysOwner || !p.ours || !p.memberOfKeysOwner) continue;
    steps.push(
      p.keysOwnerMayCreate
        ? { kind: 'give', partition: p.partition, to: p.keysOwner }
        : { kind: 'blocked', partition: p.partition, schema: p.schema, keysOwner: p.keysOwner },
    );
  }
  return steps;
}
