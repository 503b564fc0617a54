import { libraryPartitionName, libraryPartitions } from './library-partitions.js';
import { type PartitionEnd } from './partition-end.js';

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
const at = (iso: string) => Date.parse(iso);
/** A partition named as the library names one starting at `from`, unless `name` is given. */
const part = (from: number, to: number | null, name?: string): PartitionEnd => ({
  partition: `public.${name ?? libraryPartitionName(from)}`,
  fromMs: from,
  toMs: to,
});

describe('libraryPartitionName', () => {
  it.each<[string, string]>([
    ['2026-12-16T00:00:00.000Z', 'idempotency_keys_20261216t000000000'],
    ['2026-01-02T03:04:05.678Z', 'idempotency_keys_20260102t030405678'],
  ])('%s', (iso, expected) => {
    expect(libraryPartitionName(at(iso))).toBe(expected);
  });
});

describe('libraryPartitions', () => {
  const day = at('2026-12-07T00:00Z');
  const legacyEnd = at('2026-12-07T10:17:23.456Z');
  it.each<[string, PartitionEnd[], string[]]>([
    ['aligned on its own width', [part(day, day + DAY)], [libraryPartitionName(day)]],
    [
      'aligned, 15 minutes wide',
      [part(day + 45 * MINUTE, day + 60 * MINUTE)],
      [libraryPartitionName(day + 45 * MINUTE)],
    ],
    ['named for another start', [part(day, day + DAY, 'idempotency_keys_20261208t000000000')], []],
    ["an operator's name", [part(day, day + DAY, 'idempotency_keys_rest')], []],
    ['not aligned (a month from a day)', [part(day, day + 30 * DAY)], []],
    ['up to a far date', [part(day, at('9999-12-31T00:00Z'))], []],
    ['up to MAXVALUE', [part(day, null)], []],
    [
      "the first after the migration's: from its end to an aligned one's start",
      [
        { partition: 'public.idempotency_keys_legacy', fromMs: null, toMs: legacyEnd },
        part(legacyEnd, day + DAY),
        part(day + DAY, day + 2 * DAY),
      ],
      [libraryPartitionName(legacyEnd), libraryPartitionName(day + DAY)],
    ],
    [
      'not aligned and no partition before it',
      [part(legacyEnd, day + DAY), part(day + DAY, day + 2 * DAY)],
      [libraryPartitionName(day + DAY)],
    ],
  ])('%s', (_name, partitions, expected) => {
    expect(libraryPartitions(partitions).map((p) => p.partition)).toEqual(
      expected.map((name) => `public.${name}`),
    );
  });
});
