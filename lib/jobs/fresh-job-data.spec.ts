import { waitSecondsFor } from './fresh-job-data.js';

describe('waitSecondsFor', () => {
  it.each([
    ['an owner delayed 3.2 s: back after its delay', { kind: 'delayed', delayMs: 3200 }, 1, 4],
    ['an owner delayed 10 min: a minute at most', { kind: 'delayed', delayMs: 600_000 }, 1, 60],
    ['an owner delayed 10 ms: a second at least', { kind: 'delayed', delayMs: 10 }, 1, 1],
    ['an owner waiting, first start: 2 s', { kind: 'waiting' }, 1, 2],
    ['an owner waiting, third start: 8 s', { kind: 'waiting' }, 3, 8],
    ['an owner active, first start: 2 s (adversary 74)', { kind: 'there' }, 1, 2],
    ['an owner active, fourth start: 16 s', { kind: 'there' }, 4, 16],
    ['an owner active, starts not told: 2 s', { kind: 'there' }, 0, 2],
    ['an owner active, many starts: a minute at most', { kind: 'there' }, 20, 60],
    ['no owner asked after (a lost step): 1 s', undefined, 3, 1],
  ] as const)('%s', (_name, seen, starts, seconds) => {
    expect(waitSecondsFor(seen, starts)).toBe(seconds);
  });
});
