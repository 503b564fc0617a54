import { Cron, Interval, Timeout } from '@nestjs/schedule';
import { CronTime } from 'cron';
import { cronTimeSlot, cronZone, isTimerPeriod, scheduleOf } from './task-schedule.js';

describe('cronZone', () => {
  it.each([
    ['its timeZone', { timeZone: 'Asia/Tokyo' }, 'Asia/Tokyo'],
    ['its timeZone over its offset', { timeZone: 'Europe/Berlin', utcOffset: 60 }, 'Europe/Berlin'],
    ['a positive offset', { utcOffset: 330 }, 'UTC+05:30'],
    ['a negative offset', { utcOffset: -90 }, 'UTC-01:30'],
    ['no zone: the process’s own', {}, undefined],
  ])('%s', (_name, time, zone) => {
    expect(cronZone(time)).toBe(zone);
  });
});

describe('cronTimeSlot, by cron’s own CronTime', () => {
  const at = (iso: string) => Date.parse(iso);
  it.each([
    [
      'each second',
      new CronTime('* * * * * *'),
      '2026-12-04T21:30:05.400Z',
      '2026-12-04T21:30:05.000Z',
    ],
    [
      'daily at 6 in Tokyo, read in Tokyo',
      new CronTime('0 0 6 * * *', 'Asia/Tokyo'),
      '2026-12-04T21:30:00.000Z',
      '2026-12-04T21:00:00.000Z',
    ],
    [
      'at 9 in UTC+05:30',
      new CronTime('0 0 9 * * *', undefined, 330),
      '2026-12-04T04:00:00.000Z',
      '2026-12-04T03:30:00.000Z',
    ],
    [
      'a date, come: itself',
      new CronTime(new Date('2026-01-01T00:00:00Z')),
      '2026-12-04T21:30:00.000Z',
      '2026-01-01T00:00:00.000Z',
    ],
    [
      'a date, fired a little early: itself',
      new CronTime(new Date('2026-12-04T21:30:00.000Z')),
      '2026-12-04T21:29:59.500Z',
      '2026-12-04T21:30:00.000Z',
    ],
    [
      'a date to come (fired by hand before it): none',
      new CronTime(new Date('2030-01-01T00:00:00Z')),
      '2026-12-04T21:30:00.000Z',
      undefined,
    ],
  ])('%s', (_name, time, now, slot) => {
    const found = cronTimeSlot(time, at(now));
    expect(found === undefined ? undefined : new Date(found).toISOString()).toBe(slot);
  });
});

describe('scheduleOf, as @nestjs/schedule decorates a method', () => {
  class Tasks {
    @Cron('0 * * * * *', { name: 'settle', timeZone: 'Europe/Berlin' })
    cron() {}
    @Interval(500)
    interval() {}
    @Timeout(100)
    timeout() {}
    @Interval(500)
    @Cron('0 0 0 1 1 *')
    intervalOverCron() {}
    @Timeout(100)
    @Cron('0 0 0 1 1 *')
    timeoutOverCron() {}
    plain() {}
  }
  const method = (name: keyof Tasks) => Tasks.prototype[name] as object;
  it.each<[keyof Tasks, ReturnType<typeof scheduleOf>]>([
    [
      'cron',
      {
        kind: 'cron',
        cronTime: '0 * * * * *',
        timeZone: 'Europe/Berlin',
        utcOffset: undefined,
        name: 'settle',
      },
    ],
    ['interval', { kind: 'interval', everyMs: 500, name: undefined }],
    ['timeout', { kind: 'timeout' }],
    // @nestjs/schedule runs only the topmost: refused rather than keyed by the other.
    ['intervalOverCron', { kind: 'several', decorators: ['@Cron()', '@Interval()'] }],
    ['timeoutOverCron', { kind: 'several', decorators: ['@Cron()', '@Timeout()'] }],
    ['plain', { kind: 'none' }],
  ])('%s', (name, schedule) => {
    expect(scheduleOf(method(name))).toEqual(schedule);
  });
});

describe('isTimerPeriod', () => {
  it.each([
    ['a period of 200 ms', 200, true],
    ['1 ms, the shortest', 1, true],
    ['Node’s longest', 2 ** 31 - 1, true],
    ['a fraction of a ms above 1', 1.5, true],
    ['NaN (an unset variable read with Number())', Number(undefined), false],
    ['0', 0, false],
    ['a negative', -5, false],
    ['longer than Node keeps', 2 ** 31, false],
    ['Infinity', Infinity, false],
    ['a string', '200', false],
  ])('%s', (_name, everyMs, kept) => {
    expect(isTimerPeriod(everyMs)).toBe(kept);
  });
});
