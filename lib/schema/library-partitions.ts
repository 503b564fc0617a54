import { type PartitionEnd } from './partition-end.js';

/**
 * Which partitions of the keys table the library made itself, told from an operator's, by what
 * `idempotency_keys_create_partitions()` (migrations/partition-functions.ts) always does and an
 * operator's net does not: it names each partition for its start
 * (`idempotency_keys_YYYYMMDDtHHMMSSmmm`, UTC), and ends it on a multiple of the width it was
 * made under (counted from 1970). Its start is that multiple too, or, for the first partition
 * after a change of the width (or after the migration's own), the end of the partition before
 * it: that one is narrower than the next, and ends where the next, aligned one starts.
 *
 * Why it matters (adversary 113): the start-up check judges how far ahead a partition may end.
 * The library's own partitions may end as far ahead as the release that made them chose (a
 * longer retention, a wider `partitionMs`, since rolled back), which its width tells (the
 * options keep `partitionsAhead` at most MAX_PARTITIONS_PER_RETENTION and a partition at most a
 * retention wide). An operator's nets tell nothing of the layout, however many there are: a
 * median of all widths let twelve monthly nets pass, and let the partitions of a narrow layout
 * outvote a wide one's. So only the library's partitions are judged by their own width.
 */

/** The name `idempotency_keys_create_partitions()` gives a partition starting at `fromMs`. */
export function libraryPartitionName(fromMs: number): string {
  // 2026-12-16T00:00:00.000Z -> 20261216t000000000, as to_char(..., 'YYYYMMDD"t"HH24MISSMS').
  const iso = new Date(fromMs).toISOString();
  return `idempotency_keys_${iso.slice(0, 10).replace(/-/g, '')}t${iso.slice(11, 23).replace(/[:.]/g, '')}`;
}

/** Whether `partition` (its name with its schema, as SQL takes it) is named for `fromMs`. */
function namedForItsStart(partition: string, fromMs: number): boolean {
  // The library's names need no quotes, so the name follows the schema's dot as it is.
  return partition.endsWith(`.${libraryPartitionName(fromMs)}`);
}

function bounded(p: PartitionEnd): p is PartitionEnd & { fromMs: number; toMs: number } {
  return p.fromMs !== null && p.toMs !== null && p.toMs > p.fromMs && p.fromMs > 0;
}

/** Both bounds on multiples of its own width: a partition made where the width began. */
function aligned(p: { fromMs: number; toMs: number }): boolean {
  return p.toMs % (p.toMs - p.fromMs) === 0;
}

/**
 * The partitions the library made, of `partitions` (all the keys table's, with their bounds):
 * named for their start and aligned, or the first of a wider width, from the end of the one
 * before to the start of an aligned one, on a multiple of its width.
 */
export function libraryPartitions(partitions: readonly PartitionEnd[]): PartitionEnd[] {
  const named = partitions.filter(bounded).filter((p) => namedForItsStart(p.partition, p.fromMs));
  const alignedOnes = named.filter(aligned);
  const ends = new Set(partitions.map((p) => p.toMs));
  return named.filter((p) => {
    if (aligned(p)) return true;
    const width = p.toMs - p.fromMs;
    return (
      ends.has(p.fromMs) &&
      alignedOnes.some(
        (next) =>
          next.fromMs === p.toMs &&
          next.toMs - next.fromMs > width &&
          p.toMs % (next.toMs - next.fromMs) === 0,
      )
    );
  });
}
