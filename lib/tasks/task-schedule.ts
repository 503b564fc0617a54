import { cronSlot, intervalSlot, type NextTime } from './task-slot.js';

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
  | { kind: 'none' };

/** The schedule `@Cron()`, `@Interval()` or `@Timeout()` put on `method`. */
export function scheduleOf(method: object): TaskSchedule {
  const read = <T>(key: string) => Reflect.getMetadata(key, method) as T | undefined;
  const name = read<string>(SCHEDULER_NAME);
  const cron = read<{ cronTime: TaskSchedule & object; timeZone?: string; utcOffset?: number }>(
    CRON_OPTIONS,
  );
  if (cron) {
    return {
      kind: 'cron',
      cronTime: cron.cronTime as unknown as string,
      timeZone: cron.timeZone,
      utcOffset: cron.utcOffset,
      name,
    };
  }
  const interval = read<{ timeout: number }>(INTERVAL_OPTIONS);
  if (interval) return { kind: 'interval', everyMs: interval.timeout, name };
  if (read(TIMEOUT_OPTIONS)) return { kind: 'timeout' };
  return { kind: 'none' };
}

let cronTimes: Promise<CronTimeClass> | undefined;
type CronTimeClass = new (
  source: string,
  timeZone?: string,
  utcOffset?: number,
) => { getNextDateFrom(start: Date): { toMillis(): number } };

/** The `cron` package's `CronTime` (`@nestjs/schedule`'s own), loaded when a task first ticks. */
function cronTime(): Promise<CronTimeClass> {
  cronTimes ??= import('cron').then((cron) => cron.CronTime as unknown as CronTimeClass);
  return cronTimes;
}

/**
 * The slot (ms since the epoch) a tick of `schedule` fired at `nowMs` stands for: see
 * `cronSlot` and `intervalSlot`.
 */
export async function slotOf(schedule: TaskSchedule, nowMs: number): Promise<number | undefined> {
  if (schedule.kind === 'interval') return intervalSlot(nowMs, schedule.everyMs);
  if (schedule.kind !== 'cron') return undefined;
  if (typeof schedule.cronTime !== 'string') return schedule.cronTime.valueOf();
  const CronTime = await cronTime();
  const time = new CronTime(schedule.cronTime, schedule.timeZone, schedule.utcOffset);
  const next: NextTime = (fromMs) => time.getNextDateFrom(new Date(fromMs)).toMillis();
  return cronSlot(nowMs, next);
}
