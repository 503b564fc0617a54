import { TurnQueue } from './turn-queue.js';

/** A step that records when it begins and ends, and takes a few ticks between. */
function step(log: string[], name: string, inside?: () => unknown) {
  return async () => {
    log.push(`${name} begins`);
    await new Promise((resolve) => setImmediate(resolve));
    inside?.();
    await new Promise((resolve) => setImmediate(resolve));
    log.push(`${name} ends`);
  };
}

describe('TurnQueue', () => {
  it('runs turns one at a time, in the order asked', async () => {
    const queue = new TurnQueue();
    const log: string[] = [];
    await Promise.all([queue.run(step(log, 'a')), queue.run(step(log, 'b'))]);
    expect(log).toEqual(['a begins', 'a ends', 'b begins', 'b ends']);
  });

  it('runs what its turn asks, awaited, at once (waiting, it would wait for itself)', async () => {
    const queue = new TurnQueue();
    const log: string[] = [];
    await queue.run(async () => {
      log.push('a begins');
      await queue.run(step(log, 'inner'));
      log.push('a ends');
    });
    expect(log).toEqual(['a begins', 'inner begins', 'inner ends', 'a ends']);
  });

  it('lets no later turn run beside what its turn asked and did not await', async () => {
    const queue = new TurnQueue();
    const log: string[] = [];
    let unawaited: Promise<unknown> | undefined;
    const a = queue.run(async () => {
      log.push('a begins');
      unawaited = queue.run(step(log, 'inner'));
      log.push('a ends');
    });
    const b = queue.run(step(log, 'b'));
    await Promise.all([a, b, unawaited]);
    expect(log).toEqual(['a begins', 'inner begins', 'a ends', 'inner ends', 'b begins', 'b ends']);
  });

  it('queues what is asked from inside a turn once it is over', async () => {
    const queue = new TurnQueue();
    const log: string[] = [];
    let later: Promise<unknown> | undefined;
    await queue.run(async () => {
      // Asked after the turn is over (its asynchronous descendant, much later).
      setTimeout(() => (later = queue.run(step(log, 'late'))), 5);
    });
    const b = queue.run(step(log, 'b', () => new Promise((resolve) => setTimeout(resolve, 20))));
    await b;
    await new Promise((resolve) => setTimeout(resolve, 30));
    await later;
    expect(log.indexOf('late begins')).toBeGreaterThan(log.indexOf('b ends'));
  });
});

describe('TurnQueue bounded wait', () => {
  const ms = (n: number) => new Promise((resolve) => setTimeout(resolve, n));

  it('gives up a wait behind a turn awaiting app code, and never runs it', async () => {
    const queue = new TurnQueue(20, () => new Error('gave up'));
    const log: string[] = [];
    let release!: () => void;
    const held = queue.run(() => new Promise<void>((resolve) => (release = resolve)));
    const waiting = queue.run(async () => void log.push('ran'));
    await expect(waiting).rejects.toThrow('gave up');
    release();
    await held;
    await queue.run(async () => void log.push('next'));
    expect(log).toEqual(['next']);
  });

  it('keeps waiting while the turn it waits for is on the wire', async () => {
    const queue = new TurnQueue(10, () => new Error('gave up'));
    const held = queue.run(() => queue.onWire(() => ms(40)));
    await expect(Promise.all([held, queue.run(async () => 'ran')])).resolves.toEqual([
      undefined,
      'ran',
    ]);
  });
});
