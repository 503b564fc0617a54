import { handOverRetryDue } from './hand-over-retry.js';

describe('handOverRetryDue', () => {
  const hour = 3_600_000;
  it.each<[string, number | undefined, number, boolean]>([
    ['nothing given up: nothing to retry', undefined, 5 * hour, false],
    ['given up just now (a dump still holds the lock): not yet', 1_000, 1_001, false],
    ['given up less than a partition ago: not yet', 1_000, 1_000 + hour - 1, false],
    ['a partition width later: due', 1_000, 1_000 + hour, true],
    ['long after: due', 1_000, 1_000 + 10 * hour, true],
  ])('%s', (_name, givenUpAt, now, due) => {
    expect(handOverRetryDue(givenUpAt, now, hour)).toBe(due);
  });
});
