import { CronTime } from 'cron';
import { cronSlot, steadyBy, type NextTime } from './task-slot.js';
import { zoneOffsetAt } from './zone-offset.js';

/**
 * `cronSlot` against `cron` itself around changes of offset: each tick's slot must be the
 * latest time at or before it that a replica up all along runs (its timer set each time from
 * the time it fired, and, where `cron`'s next time lies behind, spinning until one lies
 * ahead, as `CronJob` does), whatever the tick: on time, late by up to just under the
 * schedule's period, or fired by a replica started in a repeated hour.
 */

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

/**
 * `cron`'s next time, remembered per time asked from: it is a pure function of that time,
 * and the oracle and every sampled tick's walk ask it from the same times again and again
 * (unremembered, one spec took 18 s of `npm test`).
 */
function nextOf(pattern: string, zone: string): NextTime {
  const time = new CronTime(pattern, zone);
  const known = new Map<number, number>();
  return (fromMs) => {
    let at = known.get(fromMs);
    if (at === undefined) {
      at = time.getNextDateFrom(new Date(fromMs), zone).toMillis();
      known.set(fromMs, at);
    }
    return at;
  };
}

/** The times a replica up since `fromMs` runs, up to `toMs`. */
function runUpAllAlong(next: NextTime, fromMs: number, toMs: number): number[] {
  const runs: number[] = [];
  let at = next(fromMs);
  while (at <= toMs) {
    runs.push(at);
    let asked = at;
    let after = next(asked);
    // `CronJob` with its next time behind: skipped, asked again a moment later.
    while (after <= asked) after = next((asked += 1_000));
    at = after;
  }
  return runs;
}

/** Every time `cron` gives from some start in the window: what some replica fires for. */
function timesFromAnyStart(next: NextTime, fromMs: number, toMs: number, stepMs: number) {
  const times = new Set<number>();
  for (let start = fromMs; start <= toMs; start += stepMs) {
    const at = next(start);
    if (at <= toMs) times.add(at);
  }
  return [...times].sort((a, b) => a - b);
}

describe('cronSlot around changes of offset', () => {
  it.each([
    // [case, zone, pattern, change of offset (UTC), span either side, times sampled in it]
    [
      'Berlin, clocks back: nightly 02:30',
      'Europe/Berlin',
      '0 30 2 * * *',
      '2026-10-25T01:00:00Z',
      30 * HOUR,
      24,
    ],
    [
      'Berlin, clocks back: hourly',
      'Europe/Berlin',
      '0 0 * * * *',
      '2026-10-25T01:00:00Z',
      5 * HOUR,
      24,
    ],
    [
      'Berlin, clocks back: every 15 minutes',
      'Europe/Berlin',
      '0 */15 * * * *',
      '2026-10-25T01:00:00Z',
      4 * HOUR,
      24,
    ],
    [
      'Berlin, clocks back: every minute',
      'Europe/Berlin',
      '0 * * * * *',
      '2026-10-25T01:00:00Z',
      2.5 * HOUR,
      6,
    ],
    [
      'Berlin, clocks back: each minute of 02:xx',
      'Europe/Berlin',
      '0 * 2 * * *',
      '2026-10-25T01:00:00Z',
      4 * HOUR,
      24,
    ],
    [
      'Berlin, clocks forward: nightly 02:30',
      'Europe/Berlin',
      '0 30 2 * * *',
      '2026-03-29T01:00:00Z',
      30 * HOUR,
      24,
    ],
    [
      'Berlin, clocks forward: every 15 minutes',
      'Europe/Berlin',
      '0 */15 * * * *',
      '2026-03-29T01:00:00Z',
      4 * HOUR,
      24,
    ],
    [
      'New York, clocks back: nightly 01:30',
      'America/New_York',
      '0 30 1 * * *',
      '2026-11-01T06:00:00Z',
      30 * HOUR,
      24,
    ],
    [
      'New York, clocks back: hourly',
      'America/New_York',
      '0 0 * * * *',
      '2026-11-01T06:00:00Z',
      5 * HOUR,
      24,
    ],
    [
      'New York, clocks forward: nightly 02:30',
      'America/New_York',
      '0 30 2 * * *',
      '2026-03-08T07:00:00Z',
      30 * HOUR,
      24,
    ],
    [
      'Sydney, clocks forward: nightly 02:30',
      'Australia/Sydney',
      '0 30 2 * * *',
      '2026-10-03T16:00:00Z',
      30 * HOUR,
      24,
    ],
    [
      'Sydney, clocks back: nightly 02:30',
      'Australia/Sydney',
      '0 30 2 * * *',
      '2026-04-04T16:00:00Z',
      30 * HOUR,
      24,
    ],
    [
      'Lord Howe, half an hour back: every 10 minutes',
      'Australia/Lord_Howe',
      '0 */10 * * * *',
      '2026-04-04T15:00:00Z',
      3 * HOUR,
      24,
    ],
    [
      'Lord Howe, half an hour back: nightly 01:45',
      'Australia/Lord_Howe',
      '0 45 1 * * *',
      '2026-04-04T15:00:00Z',
      30 * HOUR,
      24,
    ],
    [
      'Lord Howe, half an hour back: hourly',
      'Australia/Lord_Howe',
      '0 0 * * * *',
      '2026-04-04T15:00:00Z',
      5 * HOUR,
      24,
    ],
    [
      'Lord Howe, half an hour forward: every 10 minutes',
      'Australia/Lord_Howe',
      '0 */10 * * * *',
      '2026-10-03T15:30:00Z',
      3 * HOUR,
      24,
    ],
    [
      'Lord Howe, half an hour forward: nightly 02:15',
      'Australia/Lord_Howe',
      '0 15 2 * * *',
      '2026-10-03T15:30:00Z',
      30 * HOUR,
      24,
    ],
  ])(
    '%s',
    (_name, zone, pattern, change, span, samples) => {
      const next = nextOf(pattern, zone);
      const steady = steadyBy(zoneOffsetAt(zone)!);
      const from = Date.parse(change) - span;
      const to = Date.parse(change) + span;
      const runs = runUpAllAlong(next, from - 2 * span, to + span);
      const slotAt = (tick: number) => runs.filter((run) => run <= tick).pop();
      const fired = timesFromAnyStart(next, from, to, Math.max(MINUTE, span / samples));
      for (const time of fired) {
        // Late by nothing, a little, and up to just under the period of the run it falls in.
        const slot = slotAt(time)!;
        const end = runs.find((run) => run > slot);
        if (end === undefined) continue;
        for (const tick of [time, time + 50, time + Math.floor((end - time) / 2), end - 1]) {
          if (tick < time) continue;
          expect([new Date(tick), new Date(cronSlot(tick, next, steady)!)]).toEqual([
            new Date(tick),
            new Date(slotAt(tick)!),
          ]);
        }
      }
    },
    120_000,
  );

  it('the night the clocks go back, 02:30 CET is not a slot: a replica up all along ran 02:30 CEST and skips it', () => {
    const next = nextOf('0 30 2 * * *', 'Europe/Berlin');
    const steady = steadyBy(zoneOffsetAt('Europe/Berlin')!);
    const tick = Date.parse('2026-10-25T01:30:00.050Z');
    expect(next(Date.parse('2026-10-25T01:00:00Z'))).toBe(Date.parse('2026-10-25T01:30:00Z'));
    expect(new Date(cronSlot(tick, next, steady)!)).toEqual(new Date('2026-10-25T00:30:00Z'));
  });

  it('walks on from an earlier slot this replica found (a dense schedule, one call a tick)', () => {
    let calls = 0;
    const next = nextOf('* * * * * *', 'Europe/Berlin');
    const counted: NextTime = (fromMs) => (calls++, next(fromMs));
    const steady = steadyBy(zoneOffsetAt('Europe/Berlin')!);
    const since = Date.parse('2026-10-25T01:10:00Z');
    expect(cronSlot(since + 1_020, counted, steady, since)).toBe(since + 1_000);
    expect(calls).toBeLessThanOrEqual(2);
  });
});
