import { tickOutcome, type TickRecordRead } from './tick-outcome.js';

describe('tickOutcome', () => {
  const claim = { claimId: 'c-1', lockVersion: 0 };
  const row = (state: string, claimId = 'c-1', lockVersion: number | string = 0) =>
    ({ kind: 'row', state, claimId, lockVersion }) as const;
  it.each<[string, TickRecordRead, ReturnType<typeof tickOutcome>]>([
    ['done by this claim: it committed, its answer was late', row('done'), 'committed'],
    ['the same, its version read as a string', row('done', 'c-1', '0'), 'committed'],
    ['still this claim’s, unfinished, unlocked: rolled back', row('started'), 'rolled-back'],
    ['its row locked: the COMMIT still runs', { kind: 'locked' }, 'in-flight'],
    ['another claim’s now: unknown', row('done', 'c-2'), 'unknown'],
    ['taken over (a later version): unknown', row('started', 'c-1', 1), 'unknown'],
    ['no record: unknown', { kind: 'none' }, 'unknown'],
    ['unreadable: unknown, never "not committed"', { kind: 'failed' }, 'unknown'],
  ])('%s', (_name, read, outcome) => {
    expect(tickOutcome(read, claim)).toBe(outcome);
  });
});
