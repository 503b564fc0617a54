import { cronSlot, intervalSlot, steadyBy, type NextTime } from './task-slot.js';
import { zoneOffsetAt } from './zone-offset.js';

/**
 * `@nestjs/schedule`'s metadata on a method, by its keys' values (the library does not
 * depend on `@nestjs/schedule`: an app without it never loads it).
 */
const CRON_OPTIONS = 'SCHEDULE_CRON_OPTIONS';
const INTERVAL_OPTIONS = 'SCHEDULE_INTERVAL_OPTIONS';
const TIMEOUT_OPTIONS = 'SCHEDULE_TIMEOUT_OPTIONS';
const SCHEDULER_NAME = 'SCHEDULER_NAME';

/** How a scheduled method's ticks come, as `@nestjs/schedule` was told. */
export type TaskSchedule =
  | {
      kind: 'cron';
      /** A cron expression, or a date (`@Cron(new Date(…))`: one tick). */
      cronTime: string | { valueOf(): number };
      timeZone?: string;
      utcOffset?: number;
      name?: string;
    }
  | { kind: 'interval'; everyMs: number; name?: string }
  | { kind: 'timeout' }
  /**
   * More than one of `@Cron()`, `@Interval()`, `@Timeout()` on the method: `@nestjs/schedule`
   * runs only the one above the others, silently (adversary 69: an `@Interval()` over a yearly
   * `@Cron()` was keyed by the cron's slot, every tick after the first skipped as done).
   */
  | { kind: 'several'; decorators: string[] }
  | { kind: 'none' };

/** The schedule `@Cron()`, `@Interval()` or `@Timeout()` put on `method`. */
export function scheduleOf(method: object): TaskSchedule {
  const read = <T>(key: string) => Reflect.getMetadata(key, method) as T | undefined;
  const name = read<string>(SCHEDULER_NAME);
  const cron = read<{ cronTime: TaskSchedule & object; timeZone?: string; utcOffset?: number }>(
    CRON_OPTIONS,
  );
  const interval = read<{ timeout: number }>(INTERVAL_OPTIONS);
  const timeout = read(TIMEOUT_OPTIONS);
  const decorators = [
    ...(cron ? ['@Cron()'] : []),
    ...(interval ? ['@Interval()'] : []),
    ...(timeout ? ['@Timeout()'] : []),
  ];
  if (decorators.length > 1) return { kind: 'several', decorators };
  if (cron) {
    return {
      kind: 'cron',
      cronTime: cron.cronTime as unknown as string,
      timeZone: cron.timeZone,
      utcOffset: cron.utcOffset,
      name,
    };
  }
  if (interval) return { kind: 'interval', everyMs: interval.timeout, name };
  if (timeout) return { kind: 'timeout' };
  return { kind: 'none' };
}

/** The `cron` package's `CronTime`, by the shape the library reads of it. */
export interface CronTimeLike {
  readonly source?: unknown;
  readonly timeZone?: string;
  readonly utcOffset?: number;
  readonly realDate?: boolean;
  getNextDateFrom(start: Date, timeZone?: string): { toMillis(): number };
}

type CronTimeClass = new (
  source: string | Date,
  timeZone?: string,
  utcOffset?: number,
) => CronTimeLike;

let cronTimes: Promise<CronTimeClass> | undefined;

/** The `cron` package's `CronTime` (`@nestjs/schedule`'s own), loaded when a task first ticks. */
export function cronTimeClass(): Promise<CronTimeClass> {
  cronTimes ??= import('cron').then((cron) => cron.CronTime as unknown as CronTimeClass);
  return cronTimes;
}

/**
 * The zone `cron` reads a schedule in: its `timeZone`, else its `utcOffset` (in minutes, as
 * cron writes it: `UTC+hh:mm`), else the process's own (`undefined`).
 */
export function cronZone(time: Pick<CronTimeLike, 'timeZone' | 'utcOffset'>): string | undefined {
  if (time.timeZone) return time.timeZone;
  if (time.utcOffset === undefined) return undefined;
  const sign = time.utcOffset < 0 ? '-' : '+';
  const hours = Math.trunc(time.utcOffset / 60);
  const minutes = Math.abs(time.utcOffset - hours * 60);
  return `UTC${sign}${String(Math.abs(hours)).padStart(2, '0')}:${String(minutes).padStart(2, '0')}`;
}

/** How early a one-shot `@Cron(date)` tick may fire and still be its date's (see below). */
const ONE_SHOT_GRACE_MS = 1_000;

/**
 * The slot (ms since the epoch) a tick fired at `nowMs` stands for, by the cron schedule
 * that fired it (see `cronSlot`), read in its own zone as `cron` reads it.
 */
export function cronTimeSlot(time: CronTimeLike, nowMs: number): number | undefined {
  if (time.realDate) {
    // A one-shot date: its slot once it has come (a second's grace for a timer that fires a
    // little early, which the wait for the database's clock absorbs); fired by hand before it
    // (`fireOnTick()`), no slot, as a cron's tick with no time before it (adversary 72).
    const at = (time.source as { valueOf(): number }).valueOf();
    return at <= nowMs + ONE_SHOT_GRACE_MS ? at : undefined;
  }
  const zone = cronZone(time);
  const next: NextTime = (fromMs) => time.getNextDateFrom(new Date(fromMs), zone).toMillis();
  const offsetAt = zoneOffsetAt(zone);
  const slot = cronSlot(nowMs, next, offsetAt && steadyBy(offsetAt), lastSlots.get(time as object));
  if (slot !== undefined) lastSlots.set(time as object, slot);
  return slot;
}

/**
 * Each schedule's latest slot on this replica, where `cronSlot` walks on from (a schedule
 * changed with `setTime()` is another `CronTime`, its run another).
 */
const lastSlots = new WeakMap<object, number>();

/**
 * The end of the slot `slotMs` of a cron schedule: its next time after it, until which the
 * slot is the schedule's current one (a call by hand claims it). `undefined` for a one-shot
 * date, which has no next time.
 */
export function cronTimeSlotEnd(time: CronTimeLike, slotMs: number): number | undefined {
  if (time.realDate) return undefined;
  return time.getNextDateFrom(new Date(slotMs), cronZone(time)).toMillis();
}

/** The longest period Node keeps for a timer (`TIMEOUT_MAX`): a longer one fires every 1 ms. */
export const LONGEST_TIMER_MS = 2 ** 31 - 1;

/**
 * Whether an `@Interval()` period is one Node's `setInterval` keeps as given: a number from
 * 1 ms to `LONGEST_TIMER_MS`. Any other (NaN from an unset variable, 0, a negative, a longer
 * one) Node runs every 1 ms, so its ticks would have no window to be told apart by
 * (adversary 76: `@Interval(Number(process.env.SYNC_EVERY_MS))`, the variable unset).
 */
export function isTimerPeriod(everyMs: unknown): everyMs is number {
  return typeof everyMs === 'number' && everyMs >= 1 && everyMs <= LONGEST_TIMER_MS;
}

/** The slot of an `@Interval()` tick fired at `nowMs` (see `intervalSlot`). */
export function intervalTimeSlot(schedule: TaskSchedule, nowMs: number): number | undefined {
  return schedule.kind === 'interval' ? intervalSlot(nowMs, schedule.everyMs) : undefined;
}
