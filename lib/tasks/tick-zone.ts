import { type TaskSchedule } from './task-schedule.js';
import { CLOCK_SKEW_MS } from './task-slot.js';
import { zoneOffsetAt } from './zone-offset.js';

/**
 * The most two zones' clocks differ (UTC-12 to UTC+14: 26 h), and an hour: how far apart two
 * replicas in two zones fire for one occurrence of a cron schedule.
 */
const ZONES_APART_MS = 27 * 3_600_000;

/** `UTC+hh:mm` (as `cronZone` writes a `utcOffset`) as ms, else `undefined`. */
function fixedOffsetMs(zone: string): number | undefined {
  const fixed = /^UTC([+-])(\d\d):(\d\d)$/.exec(zone);
  if (!fixed) return undefined;
  const ms = (Number(fixed[2]) * 60 + Number(fixed[3])) * 60_000;
  return fixed[1] === '-' ? -ms : ms;
}

/**
 * The occurrence a cron tick of `slotMs` stands for, read in `zone`: its schedule's time on
 * the wall clock there, as the key of its zone's mark (a pure decision): `@` and the ISO time
 * without its offset (`@2026-12-06T02:00:00.000`). Two replicas that read one schedule in two
 * zones fire at two instants for the same wall-clock time (02:00 in UTC, 02:00 in Kolkata),
 * which their ticks' keys (the instants) keep apart and this one brings together. `@` sorts
 * after every tick's key (an ISO time begins with its year's digits): no range of ticks' keys
 * holds it.
 */
export function occurrenceKey(slotMs: number, zone: string): string {
  const offset = zoneOffsetAt(zone)?.(slotMs) ?? fixedOffsetMs(zone) ?? 0;
  return `@${new Date(slotMs + offset).toISOString().slice(0, -1)}`;
}

/**
 * When the mark of an occurrence counts as finished (ms since the epoch; see `occurrenceKey`),
 * so that the purge, which deletes it `retentionMs` after, keeps it while a replica in any
 * other zone may still fire for it (a pure decision).
 */
export function occurrenceMarkFinishedAt(slotMs: number, retentionMs: number): number {
  return slotMs + ZONES_APART_MS + CLOCK_SKEW_MS - retentionMs;
}

/** An occurrence's mark as read: the zone and the tick (its key, an instant) that made it. */
export interface OccurrenceMark {
  zone: string;
  slot: string;
}

/**
 * What a cron tick of `slot` (its key) read in `zone` does, by the mark of its occurrence
 * (`marked`, made by the replica that fired for it first; a pure decision):
 *  - `refuse` where a replica in another zone fired for it at another instant: this tick would
 *    run the same occurrence (the same night) again (adversary 90);
 *  - `run` otherwise: the same instant (a zone of the same offset then: the tick's own claim
 *    decides, as before); the same zone (a wall-clock time repeated as daylight saving time
 *    ends, which the slot tells apart: an hourly schedule's two ticks at 02:00); no mark read.
 */
export function tickZoneVerdict(
  zone: string,
  slot: string,
  marked: OccurrenceMark | undefined,
): { kind: 'run' } | { kind: 'refuse'; other: OccurrenceMark } {
  if (marked === undefined || marked.slot === slot || marked.zone === zone) return { kind: 'run' };
  return { kind: 'refuse', other: marked };
}

/** A cron schedule's zone as given: `timeZone`, or `utcOffset`, or neither. */
export interface GivenZone {
  readonly timeZone?: string | null;
  readonly utcOffset?: number | null;
}

/**
 * Whether a cron tick's occurrence is marked and checked (see `tickZoneVerdict`; a pure
 * decision): only for a schedule read in the process's own zone, which replicas may not
 * share. A schedule that declares its zone (`timeZone`, `utcOffset`) is read in it on every
 * replica, so its slot, the tick's key, already tells its ticks apart; marking it would refuse
 * the first tick of a schedule moved into another zone (adversary 91: `setTime(new
 * CronTime('0 0 2 * * *', 'America/New_York'))`, or a deploy that adds `timeZone`) whose
 * wall-clock time the old zone's tick had marked.
 *  - `declared`: the `@Cron()`'s own options; they decide while its job runs the `CronTime`
 *    made of them (`cron` sets the process's zone as `timeZone` on one made without a zone,
 *    so that `CronTime` cannot tell);
 *  - `live`: the `CronTime` the job runs, where it was rescheduled (`rescheduled`: another
 *    `CronTime`, or another expression): read in the process's zone where it has no
 *    `utcOffset` and no `timeZone` other than `processZone`, the one `cron` gives it.
 */
export function marksOccurrence(
  declared: GivenZone,
  live: GivenZone,
  rescheduled: boolean,
  processZone: string,
): boolean {
  if (!rescheduled) return !declared.timeZone && declared.utcOffset == null;
  return live.utcOffset == null && (!live.timeZone || live.timeZone === processZone);
}

/**
 * The start-up warning for a task's schedule (a pure decision): a cron expression with neither
 * `timeZone` nor `utcOffset` is read in each replica's own zone (its `TZ`), which replicas may
 * not share (an image with `TZ` set and one without, a VM and a container); such ticks are
 * refused at run time (`tickZoneVerdict`), and this says so before. `undefined` for an
 * interval, a one-shot date (an instant), or a cron with its zone.
 */
export function zoneWarning(
  schedule: TaskSchedule,
  where: string,
  zone: string,
): string | undefined {
  if (schedule.kind !== 'cron' || typeof schedule.cronTime !== 'string') return undefined;
  if (schedule.timeZone || schedule.utcOffset !== undefined) return undefined;
  return (
    `${where}: its @Cron() has no timeZone, so each replica reads it in its own zone (here ` +
    `${zone}, from TZ): replicas in another zone would fire for the same time at another ` +
    `instant, and their ticks are skipped. Set timeZone on the @Cron() (or the same TZ on ` +
    `every replica)`
  );
}
