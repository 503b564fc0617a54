/**
 * The partitioned layout's decisions, as pure functions of what the catalog and the clock say:
 * when a claim must see partitions made first, and which partitions the purge may drop.
 */

/** A partition of `idempotency_keys`, as `idempotency_key_partitions()` lists it. */
export interface PartitionInfo {
  /** Its name, quoted where it needs to be (`regclass` text). */
  partition: string;
  /** Its bounds; null for MINVALUE / MAXVALUE. */
  fromAt: Date | null;
  toAt: Date | null;
  /** A `DETACH ... CONCURRENTLY` that was interrupted: it only needs finishing. */
  detachPending: boolean;
  /**
   * Whether this session's role may drop it (it owns it, as a member of its owner or of its
   * schema's owner); absent: taken as yes. A partition made by another app role's session is
   * that role's (adversary 110).
   */
  droppable?: boolean;
  /** Its owner, for the warning about one this role may not drop. */
  owner?: string;
}

/** One step of the purge, in order. */
export type ExpiryStep =
  | { kind: 'finalize'; partition: string }
  | { kind: 'expire'; partition: string; fromAt: Date | null; toAt: Date }
  | { kind: 'empty'; partition: string; fromAt: Date | null; toAt: Date; owner?: string };

/**
 * What the purge does, oldest partition first: finish the detaches left pending, and drop each
 * partition whose whole range is past the retention, after carrying forward the keys that
 * must outlive it. Such a partition holds no key claimed within the retention; the newest
 * partitions are never touched, nor one that ends at MAXVALUE.
 *
 * A partition this role may not drop (another app role's, adversary 110) is emptied instead
 * (`empty`: its expired keys deleted through the keys table, which the role may): detached
 * first, its DROP would fail, leaving it out of the partitions for good with its keys (an
 * orphan); behind a pooler that failure rolled the detach back and stopped every purge at it.
 * Its pending detach is left alone for the same reason (finished, it would be out of the
 * partitions with nothing to drop it); the purge then detaches the others without
 * `CONCURRENTLY`, which PostgreSQL refuses beside a pending detach (detach-mode.ts).
 */
export function expirySteps(
  partitions: readonly PartitionInfo[],
  now: Date,
  retentionMs: number,
): ExpiryStep[] {
  const horizon = now.getTime() - retentionMs;
  const steps: ExpiryStep[] = [];
  for (const { partition, fromAt, toAt, detachPending, droppable, owner } of partitions) {
    const mayDrop = droppable !== false;
    if (detachPending) {
      if (mayDrop) steps.push({ kind: 'finalize', partition });
    } else if (toAt !== null && toAt.getTime() <= horizon) {
      steps.push(
        mayDrop
          ? { kind: 'expire', partition, fromAt, toAt }
          : { kind: 'empty', partition, fromAt, toAt, owner },
      );
    }
  }
  return steps;
}

/** What a claim does about the partitions ahead of it. */
export type CoverageAction = 'none' | 'background' | 'wait';

/**
 * Given how long the partitions this process knows of still cover (undefined: it has not
 * asked yet), whether a claim can go ahead (`none`), go ahead while more are made
 * (`background`: less than one partition's width is left), or must wait for them (`wait`:
 * its row would have no partition to go to).
 */
export function coverageAction(coveredMs: number | undefined, partitionMs: number): CoverageAction {
  if (coveredMs === undefined || coveredMs <= 0) return 'wait';
  return coveredMs > partitionMs ? 'none' : 'background';
}
