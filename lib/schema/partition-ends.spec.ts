import {
  type PartitionEnd,
  partitionEndLimitMs,
  partitionsEndingTooFar,
  startsAhead,
} from './partition-ends.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const now = Date.parse('2026-12-07T12:00:00Z');
const end = (partition: string, from: string | null, to: string | null): PartitionEnd => ({
  partition,
  fromMs: from === null ? null : Date.parse(from),
  toMs: to === null ? null : Date.parse(to),
});

describe('partitionEndLimitMs', () => {
  it.each<[string, { partitionMs: number; retentionMs?: number }, number]>([
    [
      '101 retentions (100 ahead at most, each at most a retention wide)',
      { partitionMs: 3 * HOUR, retentionMs: DAY },
      101 * DAY,
    ],
    ['the width when no retention is known', { partitionMs: HOUR }, 101 * HOUR],
    [
      'the width when wider than the retention given',
      { partitionMs: 2 * DAY, retentionMs: DAY },
      202 * DAY,
    ],
  ])('%s', (_name, layout, expected) => {
    expect(partitionEndLimitMs(layout)).toBe(expected);
  });

  const days = (from: number, to: number) =>
    end(
      `p${from}`,
      new Date(now + from * DAY).toISOString(),
      new Date(now + to * DAY).toISOString(),
    );
  it.each<[string, { partitionMs: number; retentionMs?: number }, PartitionEnd[], number]>([
    [
      'a day-wide net of a 7-day retention, cut to 2 hours since (adversary 111)',
      { partitionMs: HOUR, retentionMs: 2 * HOUR },
      [days(0, 1), days(1, 2), days(2, 3), days(13, 14)],
      101 * DAY,
    ],
    [
      "a far net beside the library's partitions: their width, not the net's",
      { partitionMs: HOUR, retentionMs: DAY },
      [days(0, 1), days(1, 2), days(2, 3), days(3, 3_000_000)],
      101 * DAY,
    ],
    [
      "two partitions, one a net: the lower median is the library's",
      { partitionMs: HOUR, retentionMs: 2 * HOUR },
      [days(0, 1), days(1, 3_000_000)],
      101 * DAY,
    ],
    [
      'a lone partition is no evidence (it may be the net)',
      { partitionMs: HOUR, retentionMs: DAY },
      [days(0, 3_000_000)],
      101 * DAY,
    ],
    [
      'partitions without both bounds are not counted',
      { partitionMs: HOUR, retentionMs: HOUR },
      [end('lo', null, '2026-12-09T00:00Z'), end('hi', '2026-12-07T00:00Z', null)],
      101 * HOUR,
    ],
  ])('with the partitions present: %s', (_name, layout, partitions, expected) => {
    expect(partitionEndLimitMs(layout, partitions)).toBe(expected);
  });
});

describe('partitionsEndingTooFar', () => {
  const limit = 101 * DAY;
  it.each<[string, PartitionEnd[], string[]]>([
    ['partitions made ahead', [end('p1', '2026-12-07T12:00Z', '2026-12-07T15:00Z')], []],
    [
      'made ahead under a wider width before a change of the options',
      [end('p1', '2026-12-08T00:00Z', '2026-12-10T00:00Z')],
      [],
    ],
    ['a net up to a far date', [end('rest', '2026-12-07T15:00Z', '9999-12-31T00:00Z')], ['rest']],
    ['a net up to next year', [end('rest', '2026-12-07T15:00Z', '2027-12-07T00:00Z')], ['rest']],
    ['MAXVALUE: named by the catalog apart', [end('rest', '2026-12-07T15:00Z', null)], []],
    ['the migrated table, ended in the past', [end('legacy', null, '2026-12-01T00:00Z')], []],
  ])('%s', (_name, partitions, expected) => {
    expect(partitionsEndingTooFar(partitions, now, limit).map((p) => p.partition)).toEqual(
      expected,
    );
  });
});

describe('startsAhead', () => {
  it.each<[string, PartitionEnd | undefined, boolean]>([
    ['a net from the end of the partitions ahead', end('rest', '2026-12-07T15:00Z', null), true],
    ['a net already live', end('rest', '2026-12-07T11:00Z', null), false],
    ['one from MINVALUE', end('rest', null, null), false],
    ['not read (the bounds unknown)', undefined, false],
  ])('%s', (_name, partition, expected) => {
    expect(startsAhead(partition, now)).toBe(expected);
  });
});
