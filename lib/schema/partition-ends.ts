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
 * at most a retention wide (the options refuse more). Not this layout's horizon: partitions
 * made ahead under a wider `partitionMs` (or more `partitionsAhead`) before a change of the
 * options stay until they are past, and must not stop the app from starting.
 */
export function partitionEndLimitMs(layout: PartitionEndLayout): number {
  return (MAX_PARTITIONS_PER_RETENTION + 1) * Math.max(layout.partitionMs, layout.retentionMs ?? 0);
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
