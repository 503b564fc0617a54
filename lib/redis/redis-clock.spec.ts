import { MAX_AGE_MS, nextOffset, redisDeadlineMs, UNKNOWN_OFFSET } from './redis-clock.js';

describe('nextOffset', () => {
  const learned = (offsetMs: number, learnedAt: number) => ({ offsetMs, learnedAt });
  it.each([
    // [case, previous, Redis's time, local time at the reply, monotonic now, next offset]
    ['the first reply sets it', UNKNOWN_OFFSET, 10_050, 10_000, 5, learned(50, 5)],
    ['the first reply sets it, Redis behind', UNKNOWN_OFFSET, 9_000, 10_000, 5, learned(-1000, 5)],
    [
      'a closer (larger) lower bound replaces it',
      learned(40, 5),
      10_050,
      10_000,
      6,
      learned(50, 6),
    ],
    ['a slower reply (smaller bound) leaves it', learned(50, 5), 10_030, 10_000, 6, learned(50, 5)],
    [
      'a bound older than a minute gives way (a clock stepped back)',
      learned(50, 5),
      10_000 - 3_600_000,
      10_000,
      5 + MAX_AGE_MS + 1,
      learned(-3_600_000, 5 + MAX_AGE_MS + 1),
    ],
    [
      'within the minute a smaller one does not',
      learned(50, 5),
      10_000 - 3_600_000,
      10_000,
      5 + MAX_AGE_MS,
      learned(50, 5),
    ],
  ])('%s', (_name, previous, redisNow, local, monotonic, expected) => {
    expect(nextOffset(previous, redisNow, local, monotonic)).toEqual(expected);
  });
});

describe('redisDeadlineMs', () => {
  it.each([
    // [case, offset, local start, timeout, deadline on Redis's clock]
    ['same clock', 0, 1_000_000, 2000, 1_002_000],
    ['Redis ahead', 250, 1_000_000, 2000, 1_002_250],
    ['Redis behind', -250, 1_000_000, 2000, 1_001_750],
    ['a fractional local time', 0, 1_000_000.7, 2000, 1_002_000],
  ])('%s', (_name, offsetMs, local, timeout, expected) => {
    expect(redisDeadlineMs({ offsetMs, learnedAt: 0 }, local, timeout)).toBe(expected);
  });
});
