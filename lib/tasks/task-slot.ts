/**
 * A tick's slot: the scheduled time it stands for, the same on every replica whose timer fired
 * for it, so that one of them runs it and the others find it taken.
 */

/**
 * An `@Interval(ms)` tick's slot: the `ms`-wide window, counted from the epoch, that it fired
 * in. Replicas start their timers at different times; every tick that fires within one window
 * is that window's tick.
 */
export function intervalSlot(nowMs: number, everyMs: number): number {
  return Math.floor(nowMs / everyMs) * everyMs;
}

/** Gives a schedule's first time strictly after `fromMs` (the cron package's `CronTime`). */
export type NextTime = (fromMs: number) => number;

/** How far back a cron slot is looked for: no schedule `cron` accepts is sparser. */
const MAX_LOOK_BACK_MS = 5 * 366 * 24 * 3_600_000;

/**
 * A `@Cron()` tick's slot: the schedule's latest time at or before `nowMs`. `cron` never fires
 * a tick before its time (an early timer is set again), so this is the time it fired for, or,
 * where it fired later than its next time (a stalled process), that next one: either way one
 * slot is never run twice. `undefined` where the schedule has no time at or before `nowMs`.
 */
export function cronSlot(nowMs: number, next: NextTime): number | undefined {
  // Back far enough to find a time at or before now (doubling: a per-second schedule is
  // found in one step, a yearly one in about thirty), then forward to the latest.
  let found: number | undefined;
  for (let back = 1_000; found === undefined && back <= MAX_LOOK_BACK_MS * 2; back *= 2) {
    const candidate = next(nowMs - back);
    if (candidate <= nowMs) found = candidate;
  }
  if (found === undefined) return undefined;
  for (let after = next(found); after <= nowMs; after = next(found)) found = after;
  return found;
}

/** A slot as its tick's key: its time in ISO 8601 (UTC, milliseconds). */
export function slotKey(slotMs: number): string {
  return new Date(slotMs).toISOString();
}

/** The most a tick waits for the database's clock to reach its slot (see `untilSlot`). */
export const MAX_SLOT_WAIT_MS = 60_000;

/**
 * What a tick fired for `slotMs` does, by the database's clock (`databaseNowMs`), the one all
 * replicas share (a pure decision): `run` where its slot has come; `wait` the `ms` left where
 * this replica's clock is ahead (its timer fired early by the shared clock, and the replica
 * whose clock is furthest ahead would otherwise claim every tick before its time: adversary
 * 67); `skip` where it is ahead by more than `MAX_SLOT_WAIT_MS`, a clock to set right (NTP),
 * not to wait out.
 */
export function untilSlot(
  slotMs: number,
  databaseNowMs: number,
): { kind: 'run' } | { kind: 'wait'; ms: number } | { kind: 'skip'; aheadMs: number } {
  const ahead = slotMs - databaseNowMs;
  if (ahead <= 0) return { kind: 'run' };
  if (ahead > MAX_SLOT_WAIT_MS) return { kind: 'skip', aheadMs: ahead };
  return { kind: 'wait', ms: ahead };
}
