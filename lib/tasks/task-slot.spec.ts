import {
  cronSlot,
  intervalSlot,
  CLOCK_SKEW_MS,
  MAX_SLOT_WAIT_MS,
  slotKey,
  tickRecordFinishedAt,
  untilSlot,
} from './task-slot.js';

/** A schedule firing every `every` ms from `offset` (as a cron expression would). */
const every =
  (everyMs: number, offset = 0) =>
  (from: number) =>
    Math.floor((from - offset) / everyMs) * everyMs + everyMs + offset;

describe('intervalSlot', () => {
  it.each([
    ['at a window start', 10_000, 1_000, 10_000],
    ['inside a window', 10_999, 1_000, 10_000],
    ['the next window', 11_000, 1_000, 11_000],
    ['a wide window', 125_000, 60_000, 120_000],
  ])('%s', (_name, now, ms, slot) => {
    expect(intervalSlot(now, ms)).toBe(slot);
  });
});

describe('cronSlot', () => {
  it.each([
    ['fired on time, each second', 5_000, every(1_000), 5_000],
    ['fired late, within its second', 5_430, every(1_000), 5_000],
    ['fired late past the next time: that one', 6_020, every(1_000), 6_000],
    ['a minute schedule, late', 60_000 * 7 + 12, every(60_000), 60_000 * 7],
    ['a daily schedule', 86_400_000 * 3 + 5, every(86_400_000), 86_400_000 * 3],
    ['an offset schedule', 10_250, every(1_000, 200), 10_200],
    ['a yearly schedule', 400 * 86_400_000, every(365 * 86_400_000), 365 * 86_400_000],
  ])('%s', (_name, now, next, slot) => {
    expect(cronSlot(now, next)).toBe(slot);
  });

  it('has no slot for a schedule whose only time is later', () => {
    expect(cronSlot(1_000, () => 50_000)).toBeUndefined();
  });
});

describe('slotKey', () => {
  it('is the slot in ISO 8601', () => {
    expect(slotKey(Date.UTC(2026, 11, 4, 21, 40))).toBe('2026-12-04T21:40:00.000Z');
  });
});

describe('untilSlot', () => {
  const slot = Date.parse('2026-12-05T01:00:00.000Z');
  it.each([
    ["the database's clock past the slot: run", slot + 20, { kind: 'run' }],
    ['at the slot to the millisecond: run', slot, { kind: 'run' }],
    // A clock behind runs late: its slot's record is kept CLOCK_SKEW_MS past the slot's end.
    ['behind by an hour: run, late', slot + 3_600_000, { kind: 'run' }],
    [
      "this replica's clock 1.5 s ahead: wait for the slot",
      slot - 1_500,
      { kind: 'wait', ms: 1_500 },
    ],
    [
      'ahead by the most it waits: wait',
      slot - MAX_SLOT_WAIT_MS,
      { kind: 'wait', ms: MAX_SLOT_WAIT_MS },
    ],
    [
      'ahead by more: skipped, a clock to set right',
      slot - MAX_SLOT_WAIT_MS - 1,
      { kind: 'skip', aheadMs: MAX_SLOT_WAIT_MS + 1 },
    ],
  ] as const)('%s', (_name, databaseNow, decision) => {
    expect(untilSlot(slot, databaseNow)).toEqual(decision);
  });
});

describe('tickRecordFinishedAt', () => {
  const hour = 3_600_000;
  // Columns: the slot's end, the retention, the database's clock read before the tick (never
  // the replica's: adversary 88), the `finished_at` to hold the record to.
  it.each([
    ['retention outlasts the slot: nothing moved', 10 * hour, 24 * hour, 9 * hour, undefined],
    ['a 6-hourly slot, 1 h retention', 6 * hour, hour, hour, 5 * hour + CLOCK_SKEW_MS],
    ['the slot nearly over: the retention covers it', 6 * hour, hour, 5.5 * hour, undefined],
    ['exactly covered', 6 * hour, hour, 5 * hour + CLOCK_SKEW_MS, undefined],
    ['a weekly slot, the default 24 h', 7 * 24 * hour, 24 * hour, 0, 6 * 24 * hour + CLOCK_SKEW_MS],
    ['a one-shot date: no end', undefined, hour, 0, undefined],
    // Kept CLOCK_SKEW_MS past the slot's end: a replica whose clock is behind fires that late.
    ['a 4 s window, 1 s retention', 4_000, 1_000, 0, 3_000 + CLOCK_SKEW_MS],
    ['a retention within the skew', 10_000, CLOCK_SKEW_MS, 0, 10_000],
    ['an end past every date', Number.POSITIVE_INFINITY, hour, 0, undefined],
    // The database's clock not read: sent, the statement's greatest() keeps the later time.
    ["the database's clock unknown: sent", 6 * hour, hour, undefined, 5 * hour + CLOCK_SKEW_MS],
    [
      "the database's clock unknown, the retention outlasting it: sent all the same",
      10 * hour,
      24 * hour,
      undefined,
      -14 * hour + CLOCK_SKEW_MS,
    ],
  ])('%s', (_name, end, retention, now, finishedAt) => {
    expect(tickRecordFinishedAt(end, retention, now)).toBe(finishedAt);
  });
});
