import { coverageAction, expirySteps, type PartitionInfo } from './partition-schedule.js';

const HOUR = 3_600_000;
const now = new Date('2026-11-30T12:30:00Z');
const at = (iso: string) => new Date(iso);

function partition(
  name: string,
  fromAt: string | null,
  toAt: string | null,
  detachPending = false,
  droppable?: boolean,
): PartitionInfo {
  return {
    partition: name,
    fromAt: fromAt === null ? null : at(fromAt),
    toAt: toAt === null ? null : at(toAt),
    detachPending,
    ...(droppable === undefined ? {} : { droppable, owner: 'api' }),
  };
}

describe('expirySteps', () => {
  it.each<[string, PartitionInfo[], number, string[]]>([
    ['nothing to drop', [partition('p12', '2026-11-30T12:00Z', '2026-11-30T13:00Z')], HOUR, []],
    [
      'a partition ending exactly at the retention’s horizon',
      [partition('p11', '2026-11-30T10:30Z', '2026-11-30T11:30Z')],
      HOUR,
      ['expire p11'],
    ],
    [
      'one that ends a millisecond after it (a key there may be within its retention)',
      [partition('p11', '2026-11-30T10:30Z', '2026-11-30T11:30:00.001Z')],
      HOUR,
      [],
    ],
    [
      'the migrated table, from MINVALUE',
      [partition('legacy', null, '2026-11-29T09:00Z'), partition('p', '2026-11-29T09:00Z', null)],
      HOUR,
      ['expire legacy'],
    ],
    [
      'oldest first, the live ones kept',
      [
        partition('p09', '2026-11-30T09:00Z', '2026-11-30T10:00Z'),
        partition('p10', '2026-11-30T10:00Z', '2026-11-30T11:00Z'),
        partition('p11', '2026-11-30T11:00Z', '2026-11-30T12:00Z'),
        partition('p12', '2026-11-30T12:00Z', '2026-11-30T13:00Z'),
        partition('p13', '2026-11-30T13:00Z', '2026-11-30T14:00Z'),
      ],
      HOUR,
      ['expire p09', 'expire p10'],
    ],
    [
      'an interrupted detach is finished, whatever its range',
      [partition('p08', '2026-11-30T08:00Z', '2026-11-30T09:00Z', true)],
      24 * HOUR,
      ['finalize p08'],
    ],
    ['MAXVALUE never', [partition('rest', '2020-01-01Z', null)], HOUR, []],
    [
      "another role's partition (not droppable) is emptied, not detached: no orphan",
      [
        partition('p09', '2026-11-30T09:00Z', '2026-11-30T10:00Z', false, false),
        partition('p10', '2026-11-30T10:00Z', '2026-11-30T11:00Z', false, true),
      ],
      HOUR,
      ['empty p09', 'expire p10'],
    ],
    [
      "another role's partition within the retention is left alone",
      [partition('p12', '2026-11-30T12:00Z', '2026-11-30T13:00Z', false, false)],
      HOUR,
      [],
    ],
    [
      "another role's interrupted detach is left (its DROP would fail)",
      [partition('p08', '2026-11-30T08:00Z', '2026-11-30T09:00Z', true, false)],
      HOUR,
      [],
    ],
  ])('%s', (_name, partitions, retentionMs, expected) => {
    const steps = expirySteps(partitions, now, retentionMs);
    expect(steps.map((step) => `${step.kind} ${step.partition}`)).toEqual(expected);
  });
});

describe('coverageAction', () => {
  it.each<[number | undefined, number, string]>([
    [undefined, HOUR, 'wait'],
    [0, HOUR, 'wait'],
    [-5_000, HOUR, 'wait'],
    [1, HOUR, 'background'],
    [HOUR, HOUR, 'background'],
    [HOUR + 1, HOUR, 'none'],
    [3 * HOUR, HOUR, 'none'],
  ])('covered for %s ms with partitions of %s ms: %s', (covered, width, expected) => {
    expect(coverageAction(covered, width)).toBe(expected);
  });
});
