import { MAX_PARTITIONS_PER_RETENTION } from '../shapes/idempotency.constants.js';
import { libraryPartitions } from './library-partitions.js';
import { type PartitionEnd } from './partition-end.js';

/**
 * How far ahead a partition of the keys table may end, judged by its bound, not by the text of
 * its bound (adversary 110). An operator's net written with a far date (`TO ('9999-12-31')`)
 * breaks the partitioned expiry exactly as one `TO (MAXVALUE)` does: once the present reaches
 * it no partition is made ahead (it covers all time to come), every key lands in it, and the
 * expiry drops it only once all of it is past the retention, years on.
 */

export type { PartitionEnd } from './partition-end.js';

/** The app's partitioned layout, as the start-up check knows it. */
export interface PartitionEndLayout {
  partitionMs: number;
  /** The app's retention; absent, the width stands for it. */
  retentionMs?: number;
  /** How many partitions the app makes ahead (a net's remedy makes them). */
  partitionsAhead?: number;
}

/**
 * The furthest ahead of now an operator's partition (one the library did not make,
 * `libraryPartitions`) may end: as far as this layout's own could, `partitionsAhead + 1`
 * partitions at most, `partitionsAhead` at most MAX_PARTITIONS_PER_RETENTION and a partition at
 * most a retention wide (the options refuse more). Past it, it is a net that stops the expiry.
 */
export function partitionEndLimitMs(layout: PartitionEndLayout): number {
  return (MAX_PARTITIONS_PER_RETENTION + 1) * Math.max(layout.partitionMs, layout.retentionMs ?? 0);
}

/**
 * How far ahead of now `partition` may end: `limitMs` (`partitionEndLimitMs`) for an operator's,
 * and for one the library made, also as far as the layout it was made under allowed. Partitions
 * made ahead before a change of the options (a wider `partitionMs`, more `partitionsAhead`, a
 * longer `retentionMs`, cut or rolled back since: adversaries 111, 113) stay until they are
 * past, and must not stop the app from starting; the layout they were made under is not known,
 * but their width tells its retention (a partition is at most a retention wide).
 */
export function partitionReachMs(
  partition: PartitionEnd,
  limitMs: number,
  library: ReadonlySet<string>,
): number {
  if (!library.has(partition.partition)) return limitMs;
  const width = partition.toMs! - partition.fromMs!;
  return Math.max(limitMs, (MAX_PARTITIONS_PER_RETENTION + 1) * width);
}

/**
 * The partitions that end further ahead of `nowMs` than they may (`partitionReachMs`): each is
 * an operator's net that stops the expiry once live. A partition without an end (`toMs` null)
 * is not among them: the catalog names those apart.
 */
export function partitionsEndingTooFar(
  partitions: readonly PartitionEnd[],
  nowMs: number,
  limitMs: number,
): PartitionEnd[] {
  const library = new Set(libraryPartitions(partitions).map((p) => p.partition));
  return partitions.filter(
    (p) => p.toMs !== null && p.toMs - nowMs > partitionReachMs(p, limitMs, library),
  );
}

/**
 * Whether the partition's whole range is still ahead: it holds no key yet (a key's `placed_at`
 * is never past the time it was written), and it cannot be given the end `now()`, which would
 * lie below its start ("empty range bound specified for partition"); it is dropped instead.
 */
export function startsAhead(partition: PartitionEnd | undefined, nowMs: number): boolean {
  return partition !== undefined && partition.fromMs !== null && partition.fromMs > nowMs;
}
