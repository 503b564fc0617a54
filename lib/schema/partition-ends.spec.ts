import {
  type PartitionEnd,
  partitionEndLimitMs,
  partitionsEndingTooFar,
  startsAhead,
} from './partition-ends.js';
import { libraryPartitionName } from './library-partitions.js';

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

  /** A partition as the library names it, `days` wide from `startDay` days after now's day. */
  const ours = (startDay: number, days = 1) => {
    const from = Date.parse('2026-12-07T00:00Z') + startDay * DAY;
    return {
      partition: `public.${libraryPartitionName(from)}`,
      fromMs: from,
      toMs: from + days * DAY,
    };
  };
  const nets = (count: number, days: number, prefix = 'public.net_') =>
    Array.from({ length: count }, (_, i) => ({
      partition: `${prefix}${i + 1}`,
      fromMs: now + DAY + i * days * DAY,
      toMs: now + DAY + (i + 1) * days * DAY,
    }));
  // A 2-hour retention: operators' partitions may end 101 x 2 h = 8.4 days ahead.
  const twoHours = 101 * 2 * HOUR;
  it.each<[string, PartitionEnd[], number]>([
    [
      "the library's daily partitions 14 days ahead, retention cut to 2 h since (adversary 111)",
      Array.from({ length: 15 }, (_, i) => ours(i)),
      0,
    ],
    [
      'a rollback: 21 narrow partitions do not outvote 15 daily ones (adversary 113)',
      [
        ...Array.from({ length: 21 }, (_, i) => ({
          partition: `public.${libraryPartitionName(now + i * 15 * 60_000)}`,
          fromMs: now + i * 15 * 60_000,
          toMs: now + (i + 1) * 15 * 60_000,
        })),
        ...Array.from({ length: 15 }, (_, i) => ours(i + 1)),
      ],
      0,
    ],
    [
      'twelve monthly nets of an operator: each judged by the layout (adversary 113)',
      nets(12, 30),
      12,
    ],
    ['one net a year wide', nets(1, 360), 1],
    ['a net of a day, a day ahead: within the layout', nets(1, 1), 0],
    [
      'monthly nets named as the library names, but not aligned as it aligns them',
      nets(12, 30).map((p) => ({ ...p, partition: `public.${libraryPartitionName(p.fromMs)}` })),
      12,
    ],
  ])('%s', (_name, partitions, refused) => {
    expect(partitionsEndingTooFar(partitions, now, twoHours)).toHaveLength(refused);
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
