import { CommitHold } from './commit-hold.js';

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('CommitHold', () => {
  it.each([
    // [the subscribers returned, the RELEASE done, the start may run]
    [true, false, false],
    [true, true, true],
    // Still running a tick after it was asked: the subscriber awaits it (waiting, a deadlock).
    [false, false, true],
  ])('subscribers returned %s, released %s: the start may run %s', async (back, done, runs) => {
    const hold = new CommitHold();
    if (back) hold.subscribersReturned();
    if (done) hold.releasedNow();
    let ran = false;
    void hold.startMayRun().then(() => (ran = true));
    await tick();
    await tick();
    expect(ran).toBe(runs);
    hold.releasedNow();
  });
});
