import { EndsInFlight, idleSpent, settledWithinIdle } from './ends-in-flight.js';

describe('EndsInFlight', () => {
  it.each([
    ['none called', 0, 0],
    ['one called, not handed over', 1, 1],
    ['two called, not handed over', 2, 2],
  ])('%s: a statement called now waits for %i', (_case, called, waited) => {
    const ends = new EndsInFlight();
    for (let at = 0; at < called; at++) ends.add(new Promise(() => undefined));
    expect(ends.before()).toHaveLength(waited);
  });

  it.each([
    ['handed over', () => Promise.resolve()],
    ['done without sending (refused)', () => Promise.reject(new Error('refused'))],
  ])('an end %s no longer holds what is called after it', async (_case, handed) => {
    const ends = new EndsInFlight();
    ends.add(handed());
    await Promise.all(ends.before());
    await Promise.resolve();
    expect(ends.before()).toHaveLength(0);
  });

  it('a statement waits only for the ends called before it', () => {
    const ends = new EndsInFlight();
    ends.add(new Promise(() => undefined));
    const waits = ends.before();
    ends.add(new Promise(() => undefined));
    expect(waits).toHaveLength(1);
  });
});

describe("idleSpent: an end's wait counts only outside its code's statements (adversary 82)", () => {
  it.each<[string, number, number, boolean, number]>([
    ['none running: counted', 100, 50, false, 150],
    // Queued behind a slow statement of its code: the handler's time.
    ['one running: not counted', 100, 50, true, 100],
    ['from nothing', 0, 25, false, 25],
  ])('%s', (_name, spent, elapsed, busy, expected) => {
    expect(idleSpent(spent, elapsed, busy)).toBe(expected);
  });
});

describe('settledWithinIdle', () => {
  // Which came first is what it says, not read off a clock: a loaded machine's timers are late.
  it.each<[string, Promise<unknown>[], boolean, 'settled' | 'bound' | 'waiting']>([
    ['none', [], false, 'settled'],
    [
      'all settled (one failed)',
      [Promise.resolve(), Promise.reject(new Error('x'))],
      false,
      'settled',
    ],
    [
      'one never settles, nothing of its code running: the bound',
      [new Promise(() => undefined)],
      false,
      'bound',
    ],
    // Behind a statement of its code that runs on: its bound has not started.
    [
      'one never settles, a statement of its code running',
      [new Promise(() => undefined)],
      true,
      'waiting',
    ],
  ])('%s', async (_case, ends, running, expected) => {
    let busy = running;
    const waited = settledWithinIdle(ends, 50, () => busy);
    const outcome = await Promise.race([
      waited,
      new Promise<'waiting'>((resolve) => setTimeout(() => resolve('waiting'), 1_000)),
    ]);
    expect(outcome).toBe(expected);
    // Its code's statements done: the bound runs, and no timer is left behind.
    busy = false;
    await waited;
  });

  it("counts the time once its code's statements are done", async () => {
    let busy = true;
    setTimeout(() => (busy = false), 100);
    const started = Date.now();
    expect(await settledWithinIdle([new Promise(() => undefined)], 50, () => busy)).toBe('bound');
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
  });

  it('no deadline: the ends alone', async () => {
    expect(
      await settledWithinIdle([Promise.resolve()], Number.POSITIVE_INFINITY, () => false),
    ).toBe('settled');
  });
});
