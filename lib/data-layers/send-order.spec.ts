import { SendOrder } from './send-order.js';

const ticks = (n: number) =>
  Array.from({ length: n }).reduce<Promise<void>>(
    (before) => before.then(() => new Promise((resolve) => setImmediate(resolve))),
    Promise.resolve(),
  );

describe('SendOrder', () => {
  it.each<[string, number[], string[]]>([
    ['a slow preparation first: the next waits for its send', [5, 0], ['first', 'second']],
    ['a slow preparation second: the first is sent before', [0, 5], ['first', 'second']],
    ['three, the middle slow', [0, 5, 0], ['first', 'second', 'third']],
  ])('%s', async (_case, delays, expected) => {
    const order = new SendOrder();
    const view = {};
    const sent: string[] = [];
    const names = ['first', 'second', 'third'];
    await Promise.all(
      delays.map((delay, at) =>
        order.after(
          view,
          () => ticks(delay),
          () => sent.push(names[at]),
        ),
      ),
    );
    expect(sent).toEqual(expected);
  });

  it('a preparation that fails holds none after it up', async () => {
    const order = new SendOrder();
    const view = {};
    const failed = order.after(
      view,
      () => Promise.reject(new Error('no')),
      () => 'never',
    );
    const next = order.after(
      view,
      () => Promise.resolve(),
      () => 'sent',
    );
    await expect(failed).rejects.toThrow('no');
    await expect(next).resolves.toEqual({ sent: 'sent' });
  });

  it('does not wait for a sent statement’s answer (boxed)', async () => {
    const order = new SendOrder();
    const answer = new Promise<never>(() => undefined);
    const { sent } = await order.after(
      {},
      () => Promise.resolve(),
      () => answer,
    );
    expect(sent).toBe(answer);
  });

  it('keeps each view apart', async () => {
    const order = new SendOrder();
    const sent: string[] = [];
    await Promise.all([
      order.after(
        {},
        () => ticks(5),
        () => sent.push('slow view'),
      ),
      order.after(
        {},
        () => Promise.resolve(),
        () => sent.push('other view'),
      ),
    ]);
    expect(sent).toEqual(['other view', 'slow view']);
  });
});
