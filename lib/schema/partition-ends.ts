import { MAX_PARTITIONS_PER_RETENTION } from '../shapes/idempotency.constants.js';

/**
 * How far ahead a partition of the keys table may end, judged by its bound, not by the text of
 * its bound (adversary 110). An operator's net written with a far date (`TO ('9999-12-31')`)
 * breaks the partitioned expiry exactly as one `TO (MAXVALUE)` does: once the present reaches
 * it no partition is made ahead (it covers all time to come), every key lands in it, and the
 * expiry drops it only once all of it is past the retention, years on.
 */

/** A partition with its bounds as milliseconds since 1970 (null: MINVALUE / MAXVALUE). */
export interface PartitionEnd {
  /** Its name with its schema, quoted as SQL takes them. */
  partition: string;
  fromMs: number | null;
  toMs: number | null;
}

/** The app's partitioned layout, as the start-up check knows it. */
export interface PartitionEndLayout {
  partitionMs: number;
  /** The app's retention; absent, the width stands for it. */
  retentionMs?: number;
}

/**
 * The furthest ahead of now a partition of the library's can end: `partitionsAhead + 1`
 * partitions at most, `partitionsAhead` at most MAX_PARTITIONS_PER_RETENTION and a partition
 * at most a retention wide (the options refuse more). Not this layout's horizon alone:
 * partitions made ahead before a change of the options (a wider `partitionMs`, more
 * `partitionsAhead`, a longer `retentionMs`, cut since: adversary 111) stay until they are
 * past, and must not stop the app from starting. Their width tells the retention they were
 * made under (at most a retention wide), so the typical width of the partitions present (their
 * median: an operator's net or two cannot move it) stands for the retention too.
 */
export function partitionEndLimitMs(
  layout: PartitionEndLayout,
  partitions: readonly PartitionEnd[] = [],
): number {
  return (
    (MAX_PARTITIONS_PER_RETENTION + 1) *
    Math.max(layout.partitionMs, layout.retentionMs ?? 0, typicalWidthMs(partitions))
  );
}

/**
 * The median width of the partitions with both bounds; 0 with fewer than two (a lone
 * partition is no evidence of its own: it may be the net).
 */
export function typicalWidthMs(partitions: readonly PartitionEnd[]): number {
  const widths = partitions
    .filter((p) => p.fromMs !== null && p.toMs !== null)
    .map((p) => p.toMs! - p.fromMs!)
    .sort((a, b) => a - b);
  if (widths.length < 2) return 0;
  // The lower median: with two partitions, a net beside one of the library's is judged by it.
  return widths[Math.floor((widths.length - 1) / 2)];
}

/**
 * The partitions that end further ahead of `nowMs` than `limitMs`: no partition of the
 * library's does, so each is an operator's net that stops the expiry once live. A partition
 * without an end (`toMs` null) is not among them: the catalog names those apart.
 */
export function partitionsEndingTooFar(
  partitions: readonly PartitionEnd[],
  nowMs: number,
  limitMs: number,
): PartitionEnd[] {
  return partitions.filter((p) => p.toMs !== null && p.toMs - nowMs > limitMs);
}

/**
 * Whether the partition's whole range is still ahead: it holds no key yet (a key's `placed_at`
 * is never past the time it was written), and it cannot be given the end `now()`, which would
 * lie below its start ("empty range bound specified for partition"); it is dropped instead.
 */
export function startsAhead(partition: PartitionEnd | undefined, nowMs: number): boolean {
  return partition !== undefined && partition.fromMs !== null && partition.fromMs > nowMs;
}
