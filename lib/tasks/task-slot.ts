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
 * How near a change of a zone's offset `cron`'s next time may depend on where it is asked
 * from: its repeated (or skipped) local times span the change's size (2 h at most, Troll's)
 * on either side, and `cron` looks 1 h and 2 h back to prefer an hour's first pass.
 */
export const OFFSET_CHANGE_REACH_MS = 2 * 3_600_000;

/**
 * Whether `cron`'s next time from `ms` is the one a replica up all along reaches: no change of
 * the zone's offset within `OFFSET_CHANGE_REACH_MS` of it (see `steadyBy`).
 */
export type IsSteady = (ms: number) => boolean;

/**
 * A `@Cron()` tick's slot: the latest of the schedule's times at or before `nowMs` that a
 * replica up all along runs, its timer set each time from the time before it. `cron` never
 * fires a tick before its time (an early timer is set again), so this is the time it fired
 * for, or, where it fired later than its next time (a stalled process), that next one: either
 * way one slot is never run twice. A time `cron` runs only on a replica started just before
 * it is never a slot: the second pass of a local time repeated as the clocks go back, which
 * `cron` skips from the first (adversary 80: a nightly 02:30 ran at 02:30 CEST on one replica
 * and at 02:30 CET on one restarted in between); the walk to the latest time starts from a
 * time away from any change of the zone's offset (`isSteady`), where every replica's next
 * time is the same. `undefined` where the schedule has no time at or before `nowMs`.
 *
 * The cost: a few `next` calls, more within two hours of a change of offset, where the walk
 * starts before it (one call for each of the schedule's times in up to six hours). `since`, a
 * slot this replica found before (one of the run's times), is where the walk starts instead
 * when it is that near: a tick of a dense schedule walks from the tick before it.
 */
export function cronSlot(
  nowMs: number,
  next: NextTime,
  isSteady: IsSteady = () => true,
  since?: number,
): number | undefined {
  if (since !== undefined && since <= nowMs && nowMs - since <= 3 * OFFSET_CHANGE_REACH_MS) {
    return latestRun(since, nowMs, next);
  }
  // Back far enough to find a time at or before now (doubling: a per-second schedule is
  // found in one step, a yearly one in about thirty), then forward to the latest.
  for (let back = 1_000; back <= MAX_LOOK_BACK_MS * 2; back *= 2) {
    let from = nowMs - back;
    for (let away = 0; away < 8 && !isSteady(from); away++) from -= OFFSET_CHANGE_REACH_MS;
    const found = next(from);
    if (found <= nowMs) return latestRun(found, nowMs, next);
  }
  return undefined;
}

/**
 * The latest time at or before `nowMs` of the run of times from `found` on, each the next
 * from the one before, as `cron` sets its timer. Where `cron`'s next time lies behind the
 * time asked from (Lord Howe's half-hour repeated as its clocks go back: `cron` gives the
 * first pass again, and its timer spins until the local time is past it), the next run is
 * the first time after the repeat, found by halving.
 */
function latestRun(found: number, nowMs: number, next: NextTime): number {
  for (;;) {
    let after = next(found);
    if (after <= found) after = nextAhead(found, next);
    if (after > nowMs) return found;
    found = after;
  }
}

/** The first of `next`'s times after `fromMs` that lies ahead of the time it was asked from. */
function nextAhead(fromMs: number, next: NextTime): number {
  let behind = fromMs;
  let ahead = fromMs + OFFSET_CHANGE_REACH_MS;
  while (next(ahead) <= ahead) ahead += OFFSET_CHANGE_REACH_MS;
  while (ahead - behind > 1_000) {
    const mid = behind + Math.floor((ahead - behind) / 2_000) * 1_000;
    if (next(mid) > mid) ahead = mid;
    else behind = mid;
  }
  return next(ahead);
}

/**
 * `IsSteady` by a zone's offset (ms) at a time: steady where the offset is the same
 * `OFFSET_CHANGE_REACH_MS` before and after (two changes of offset are months apart).
 */
export function steadyBy(offsetAt: (ms: number) => number): IsSteady {
  return (ms) => offsetAt(ms - OFFSET_CHANGE_REACH_MS) === offsetAt(ms + OFFSET_CHANGE_REACH_MS);
}

/**
 * The most a replica's clock may be off the database's, ahead or behind, and its ticks still
 * run: ahead, a tick waits up to this for its slot (`untilSlot`); behind, a tick fires up to
 * this late by the shared clock and must still find its slot's record (`tickRecordFinishedAt`).
 * Further off, its ticks are skipped, logging why: a clock to set right (NTP), not to wait out.
 */
export const CLOCK_SKEW_MS = 60_000;

/**
 * When a tick's record must count as finished (ms since the epoch), so that the purge, which
 * deletes a record `retentionMs` after it finished, keeps it until its slot ends at
 * `slotEndMs`, and `CLOCK_SKEW_MS` after (a pure decision): while the slot is current, a
 * replica whose timer fires late in it, or a call by hand, claims the same slot, and must find
 * its record (adversary 78: an `@Interval()`, or a cron, sparser than the retention ran a slot
 * twice); and a replica whose clock is behind the database's reads the slot as current after
 * it ended by the database's clock (adversary 82: a record purged the moment its slot ended
 * was run again by a replica 1.5 s behind). `undefined` where the slot has no end (a one-shot
 * date), or where the retention already outlasts that from `databaseNowMs`, the database's
 * clock read before the tick ran: the record's `finished_at` is that clock's, and no earlier.
 * Never by this replica's clock (adversary 88: a replica 15 s ahead skipped a hold that the
 * record needed, and the purge let a replica behind run the slot again); where the database's
 * clock was not read, the hold is kept, and its `greatest()` with the COMMIT's clock keeps the
 * later time. Written by the statement that marks the record done, in its COMMIT (COMPLETE_HELD;
 * adversary 90: a hold sent after the COMMIT could be lost with its connection).
 */
export function tickRecordFinishedAt(
  slotEndMs: number | undefined,
  retentionMs: number,
  databaseNowMs: number | undefined,
): number | undefined {
  if (slotEndMs === undefined || !Number.isFinite(slotEndMs)) return undefined;
  const finishedAt = slotEndMs + CLOCK_SKEW_MS - retentionMs;
  if (databaseNowMs === undefined) return finishedAt;
  return finishedAt > databaseNowMs ? finishedAt : undefined;
}

/** A slot as its tick's key: its time in ISO 8601 (UTC, milliseconds). */
export function slotKey(slotMs: number): string {
  return new Date(slotMs).toISOString();
}

/** The most a tick waits for the database's clock to reach its slot (see `untilSlot`). */
export const MAX_SLOT_WAIT_MS = CLOCK_SKEW_MS;

/**
 * What a tick fired for `slotMs` does, by the database's clock (`databaseNowMs`), the one all
 * replicas share (a pure decision): `run` where its slot has come; `wait` the `ms` left where
 * this replica's clock is ahead (its timer fired early by the shared clock, and the replica
 * whose clock is furthest ahead would otherwise claim every tick before its time: adversary
 * 67); `skip` where it is ahead by more than `MAX_SLOT_WAIT_MS`, a clock to set right (NTP),
 * not to wait out. A clock behind runs its ticks late: each finds its slot's record, kept
 * `CLOCK_SKEW_MS` past the slot's end (`tickRecordFinishedAt`). (A tick is not refused for a
 * slot long over by the shared clock: a replica started with its clock hours behind would
 * otherwise skip every tick, where the rule for a late tick is that it stands for its slot.)
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
