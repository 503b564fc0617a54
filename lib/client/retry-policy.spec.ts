import { nextDelayMs, outcomeOf, retryAfterMs } from './retry-policy.js';

describe('outcomeOf', () => {
  it.each<[number, boolean, string]>([
    [201, false, 'done'],
    [200, true, 'done'],
    [500, true, 'done'], // a stored 500, replayed: asking again gets it again
    [409, true, 'done'],
    [0, false, 'retry'], // no answer at all
    [409, false, 'retry'],
    [408, false, 'retry'], // an outer timeout: the handler goes on, nothing stored
    [408, true, 'done'],
    [425, false, 'retry'], // too early (RFC 8470): asked again, it runs
    [429, false, 'retry'],
    [500, false, 'retry'],
    [502, false, 'retry'],
    [503, false, 'retry'],
    [400, false, 'done'],
    [401, false, 'done'],
    [404, false, 'done'],
    [413, false, 'done'],
    [422, false, 'done'],
  ])('status %s, replayed %s: %s', (status, replayed, outcome) => {
    expect(outcomeOf(status, replayed)).toBe(outcome);
  });
});

describe('retryAfterMs', () => {
  const now = Date.parse('2026-11-30T12:00:00Z');
  it.each<[string | null, number | undefined]>([
    [null, undefined],
    ['', undefined],
    ['2', 2000],
    [' 0 ', 0],
    ['86400', 10_000], // capped
    ['Mon, 30 Nov 2026 12:00:03 GMT', 3000],
    ['Mon, 30 Nov 2026 11:59:00 GMT', 0], // in the past
    ['soon', undefined],
    ['-1', undefined],
  ])('%j -> %s', (header, expected) => {
    expect(retryAfterMs(header, now, 10_000)).toBe(expected);
  });
});

describe('nextDelayMs', () => {
  it.each<[number, number, number | undefined, number]>([
    [0, 0.5, undefined, 50], // half of the first ceiling, 100
    [3, 0.5, undefined, 400], // ceiling 800
    [10, 0.99, undefined, 4950], // ceiling capped at 5000
    [0, 0, undefined, 0],
    [0, 0.5, 2000, 2000], // never sooner than Retry-After
    [6, 0.9, 1000, 4500], // the jittered wait when it is longer
  ])('attempt %s, random %s, Retry-After %s ms -> %s ms', (attempt, random, after, expected) => {
    expect(
      nextDelayMs(attempt, { baseDelayMs: 100, maxDelayMs: 5000, random, retryAfterMs: after }),
    ).toBe(expected);
  });
});
