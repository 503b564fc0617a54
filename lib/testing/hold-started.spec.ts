import { holdStartedAt, type HoldFields } from './hold-started.js';

describe('holdStartedAt', () => {
  it.each<[string, HoldFields, number | undefined]>([
    ['its first claim: from its creation', { createdAt: 100, finished: false }, 100],
    [
      'taken over (a job’s later step, a retry after a 503): from the takeover',
      { createdAt: 100, leasedAt: 5_000, finished: false },
      5_000,
    ],
    [
      'taken over after a release: held again',
      { createdAt: 100, leasedAt: 5_000, released: false, finished: false },
      5_000,
    ],
    [
      'given back (between a job’s steps, a 503): not counted',
      { createdAt: 100, released: true, finished: false },
      undefined,
    ],
    ['finished: not counted', { createdAt: 100, leasedAt: 5_000, finished: true }, undefined],
  ])('%s', (_name, record, expected) => {
    expect(holdStartedAt(record)).toBe(expected);
  });
});
