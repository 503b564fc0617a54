import {
  marksOccurrence,
  occurrenceKey,
  occurrenceMarkFinishedAt,
  tickZoneVerdict,
  zoneWarning,
} from './tick-zone.js';
import { type TaskSchedule } from './task-schedule.js';

describe('occurrenceKey', () => {
  const utcNight = Date.UTC(2026, 11, 6, 2);
  it.each([
    ['02:00 in UTC', utcNight, 'UTC', '@2026-12-06T02:00:00.000'],
    [
      '02:00 in Kolkata (20:30Z the evening before)',
      utcNight - 5.5 * 3_600_000,
      'Asia/Kolkata',
      '@2026-12-06T02:00:00.000',
    ],
    ['02:00Z read in Kolkata: 07:30 there', utcNight, 'Asia/Kolkata', '@2026-12-06T07:30:00.000'],
    [
      'a fixed offset (utcOffset)',
      utcNight - 2 * 3_600_000,
      'UTC+02:00',
      '@2026-12-06T02:00:00.000',
    ],
    ['a negative fixed offset', utcNight + 3 * 3_600_000, 'UTC-03:00', '@2026-12-06T02:00:00.000'],
    [
      'New York in winter (UTC-5)',
      utcNight + 5 * 3_600_000,
      'America/New_York',
      '@2026-12-06T02:00:00.000',
    ],
    [
      'New York in summer (UTC-4)',
      Date.UTC(2026, 6, 6, 6),
      'America/New_York',
      '@2026-07-06T02:00:00.000',
    ],
  ])('%s', (_name, slot, zone, key) => {
    expect(occurrenceKey(slot, zone)).toBe(key);
  });

  it('sorts after every tick key (an ISO instant)', () => {
    expect(occurrenceKey(utcNight, 'UTC') > new Date(utcNight).toISOString()).toBe(true);
  });
});

describe('occurrenceMarkFinishedAt', () => {
  it.each([
    ['the default retention (24 h)', 86_400_000, 3 * 3_600_000 + 60_000],
    ['a short retention (2 s)', 2_000, 27 * 3_600_000 + 60_000 - 2_000],
    ['a long retention (7 d)', 7 * 86_400_000, 27 * 3_600_000 + 60_000 - 7 * 86_400_000],
  ])('%s: kept 27 h and a minute past its slot', (_name, retention, fromSlot) => {
    expect(occurrenceMarkFinishedAt(1_000_000, retention)).toBe(1_000_000 + fromSlot);
  });
});

describe('tickZoneVerdict', () => {
  const utc = { zone: 'UTC', slot: '2026-12-06T02:00:00.000Z' };
  it.each([
    ['its own zone marked it, for its own instant', 'UTC', utc.slot, utc, { kind: 'run' }],
    [
      'a zone of the same offset marked it, for the same instant (Europe/London in winter)',
      'Europe/London',
      utc.slot,
      utc,
      { kind: 'run' },
    ],
    [
      'its own zone marked it at another instant (02:00 repeated as DST ends, hourly)',
      'Europe/Berlin',
      '2026-10-25T01:00:00.000Z',
      { zone: 'Europe/Berlin', slot: '2026-10-25T00:00:00.000Z' },
      { kind: 'run' },
    ],
    ['no mark could be read', 'UTC', utc.slot, undefined, { kind: 'run' }],
    [
      'another zone marked it, for another instant (Kolkata after UTC)',
      'Asia/Kolkata',
      '2026-12-05T20:30:00.000Z',
      utc,
      { kind: 'refuse', other: utc },
    ],
  ] as const)('%s', (_name, zone, slot, marked, verdict) => {
    expect(tickZoneVerdict(zone, slot, marked)).toEqual(verdict);
  });
});

describe('marksOccurrence', () => {
  const none = {};
  const utc = { timeZone: 'UTC' };
  const newYork = { timeZone: 'America/New_York' };
  it.each([
    ['a @Cron() without its zone (cron gave it the process zone)', none, utc, false, true],
    [
      'a @Cron() without its zone, its job read in another (a replica of that TZ)',
      none,
      { timeZone: 'Asia/Kolkata' },
      false,
      true,
    ],
    ['a @Cron() with timeZone', utc, utc, false, false],
    ['a @Cron() with utcOffset', { utcOffset: 120 }, { utcOffset: 120 }, false, false],
    ['a @Cron() with utcOffset 0', { utcOffset: 0 }, { utcOffset: 0 }, false, false],
    ['a @Cron() with a null utcOffset (none)', { utcOffset: null }, utc, false, true],
    ['rescheduled into a zone of its own (setTime)', utc, newYork, true, false],
    ['rescheduled into a zone, from none', none, newYork, true, false],
    ['rescheduled into a utcOffset', none, { utcOffset: -300 }, true, false],
    ['rescheduled without a zone (cron gave it the process zone)', utc, utc, true, true],
    ['rescheduled, a CronTime with no zone at all', newYork, none, true, true],
  ] as const)('%s: marked %s', (_name, declared, live, rescheduled, marked) => {
    expect(marksOccurrence(declared, live, rescheduled, 'UTC')).toBe(marked);
  });
});

describe('zoneWarning', () => {
  it.each([
    ['a cron without its zone', { kind: 'cron', cronTime: '0 0 2 * * *' }, true],
    ['a cron with timeZone', { kind: 'cron', cronTime: '0 0 2 * * *', timeZone: 'UTC' }, false],
    ['a cron with utcOffset', { kind: 'cron', cronTime: '0 0 2 * * *', utcOffset: 0 }, false],
    ['a one-shot date (an instant)', { kind: 'cron', cronTime: new Date(0) }, false],
    ['an interval', { kind: 'interval', everyMs: 1_000 }, false],
  ] as const)('%s: warned %s', (_name, schedule, warned) => {
    const warning = zoneWarning(schedule as TaskSchedule, 'Settle.nightly', 'Asia/Kolkata');
    expect(warning !== undefined).toBe(warned);
    if (warning) expect(warning).toMatch(/timeZone.*Asia\/Kolkata.*TZ/s);
  });
});
