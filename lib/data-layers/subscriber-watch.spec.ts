import { leftOpen, SubscriberWatch } from './subscriber-watch.js';

describe('leftOpen', () => {
  it.each<[string, number, number, number, boolean]>([
    ['nothing started', 0, 2, 2, false],
    ['one started and awaited to its end', 0, 2, 2, false],
    ['one still starting (its SAVEPOINT not sent)', 1, 2, 2, true],
    ['one started and still open', 0, 2, 3, true],
    ['one still starting, another open', 1, 2, 3, true],
  ])('%s -> %s', (_name, starting, then, now, expected) => {
    expect(leftOpen(starting, then, now)).toBe(expected);
  });
});

describe('SubscriberWatch', () => {
  it('counts a start until it settles, once', () => {
    const watch = new SubscriberWatch('beforeTransactionCommit', 2);
    const settled = watch.startBegan();
    expect(watch.leftOpen(2)).toBe(true);
    settled();
    settled();
    expect(watch.leftOpen(2)).toBe(false);
    expect(watch.leftOpen(3)).toBe(true);
  });
});
