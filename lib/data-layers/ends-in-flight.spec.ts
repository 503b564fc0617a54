import { EndsInFlight, settledWithin } from './ends-in-flight.js';

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

describe('settledWithin', () => {
  it.each([
    ['none', [], 'settled'],
    ['all settled (one failed)', [Promise.resolve(), Promise.reject(new Error('x'))], 'settled'],
    ['one never settles: the bound', [Promise.resolve(), new Promise(() => undefined)], 'bound'],
  ])('%s: %s', async (_case, ends, expected) => {
    const started = Date.now();
    await settledWithin(ends as Promise<unknown>[], 50);
    expect(Date.now() - started >= 45 ? 'bound' : 'settled').toBe(expected);
  });
});
