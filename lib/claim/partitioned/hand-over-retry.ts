/**
 * When a claim may try again a hand-over of partitions that was given up (`handOverPartitions`).
 *
 * A hand-over is given up when a partition's lock is held: by a claim in flight, or for minutes
 * by pg_dump or a long read of the keys table (ACCESS SHARE on every partition). Tried again at
 * the very next claim, it would ask for the lock again and again for as long as that read runs
 * (adversary 114). One partition's width later is soon enough: until the partition expires
 * nothing needs it given (only a purge by another role does, to drop it), and the purge of
 * this process tries it at each run anyway.
 */

/**
 * Whether a claim at `now` may start the hand-over again, given when it was last given up
 * (`undefined`: not given up, nothing to retry). Times are `performance.now()` milliseconds.
 *
 * @example
 * handOverRetryDue(1_000, 1_500, 3_600_000); // false: given up half a second ago
 */
export function handOverRetryDue(
  givenUpAt: number | undefined,
  now: number,
  partitionMs: number,
): boolean {
  return givenUpAt !== undefined && now - givenUpAt >= partitionMs;
}
