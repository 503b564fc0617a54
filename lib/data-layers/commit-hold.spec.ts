import { CommitHold, startWaits } from './commit-hold.js';

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('startWaits', () => {
  it.each<[string, boolean | undefined, boolean, boolean]>([
    // [its own subscriber's call returned, the event's subscribers all returned, it waits]
    ['its own returned, another still awaiting a write', true, false, true],
    ['its own still running (it awaits the start)', false, false, false],
    ['its own returned, all returned', true, true, true],
    ['asked from no subscriber call, all returned', undefined, true, true],
    ['asked from no subscriber call, some still running', undefined, false, false],
  ])('%s', (_name, own, all, waits) => {
    expect(startWaits(own, all)).toBe(waits);
  });
});

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

  it('tells a start apart by the subscriber that asked it, not by the others', async () => {
    const hold = new CommitHold();
    let writeDone!: () => void;
    const write = new Promise<void>((resolve) => (writeDone = resolve));
    const decided: Record<string, boolean> = {};
    // One awaits a write of its own; one starts without awaiting and returns at once; one
    // awaits its start.
    void hold.subscriberCall(async () => await write);
    hold.subscriberCall(() => void hold.startMayRun().then((held) => (decided.side = held)));
    void hold.subscriberCall(async () => {
      decided.awaited = await hold.startMayRun();
    });
    await tick();
    await tick();
    expect(decided).toEqual({ awaited: false });
    writeDone();
    hold.subscribersReturned();
    hold.releasedNow();
    await tick();
    expect(decided).toEqual({ awaited: false, side: true });
  });

  it('notes a subscriber that throws as returned, and throws its error', () => {
    const hold = new CommitHold();
    expect(() =>
      hold.subscriberCall(() => {
        throw new Error('refused');
      }),
    ).toThrow('refused');
  });
});
