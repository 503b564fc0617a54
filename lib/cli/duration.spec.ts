import { formatDuration } from './duration.js';

describe('formatDuration', () => {
  it.each([
    [0, '0 ms'],
    [999, '999 ms'],
    [1_000, '1 s'],
    [59_999, '59 s'],
    [60_000, '1 min'],
    [3_599_999, '59 min'],
    [3_600_000, '1 h'],
    [2.5 * 3_600_000, '2 h'],
    [86_400_000, '1 d'],
    [-90 * 60_000, '1 h'],
  ])('%d ms reads "%s"', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});
