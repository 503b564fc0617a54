import { AsyncLocalStorage } from 'node:async_hooks';
import { OwnedAsyncStorage } from './owned-async-storage.js';

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('OwnedAsyncStorage', () => {
  it('sees, for each owner, the value of its own nearest run, whatever others ran inside', async () => {
    const a = new OwnedAsyncStorage<string>();
    const b = new OwnedAsyncStorage<string>();
    const seen: (string | undefined)[][] = [];
    const look = () => seen.push([a.getStore(), b.getStore()]);
    look();
    await a.run('a1', async () => {
      look();
      await tick();
      await b.run('b1', async () => {
        await tick();
        look();
        await a.run('a2', async () => {
          await tick();
          look();
        });
        look();
      });
      look();
    });
    look();
    expect(seen).toEqual([
      [undefined, undefined],
      ['a1', undefined],
      ['a1', 'b1'],
      ['a2', 'b1'],
      ['a1', 'b1'],
      ['a1', undefined],
      [undefined, undefined],
    ]);
  });

  it('keeps each owner to its own context across concurrent runs', async () => {
    const queue = new OwnedAsyncStorage<number>();
    const seen = await Promise.all(
      [1, 2, 3].map((n) =>
        queue.run(n, async () => {
          await tick();
          return queue.getStore();
        }),
      ),
    );
    expect(seen).toEqual([1, 2, 3]);
  });

  it("returns the callback's value and leaves no value behind after a throw", () => {
    const store = new OwnedAsyncStorage<string>();
    expect(store.run('x', () => 42)).toBe(42);
    expect(() =>
      store.run('x', () => {
        throw new Error('boom');
      }),
    ).toThrow('boom');
    expect(store.getStore()).toBeUndefined();
  });

  // Node.js's AsyncContextFrame storages (22+, by flag; 24's default) keep no such list.
  const listed =
    typeof (AsyncLocalStorage.prototype as { _enable?: unknown })._enable === 'function';

  it('enables no AsyncLocalStorage of its own, however many owners run (the control does)', () => {
    if (!listed) return;
    const enabled = () => {
      let count = 0;
      const proto = AsyncLocalStorage.prototype as unknown as { _enable(): void };
      const original = proto._enable;
      proto._enable = function (this: { enabled: boolean }) {
        if (!this.enabled) count++;
        return original.call(this);
      };
      return {
        count: () => count,
        restore: () => (proto._enable = original),
      };
    };
    const owned = enabled();
    try {
      for (let i = 0; i < 50; i++) new OwnedAsyncStorage<number>().run(i, () => undefined);
      // The shared storage may be enabled here once, the first time any owner runs.
      expect(owned.count()).toBeLessThanOrEqual(1);
      const control = enabled();
      try {
        for (let i = 0; i < 50; i++) new AsyncLocalStorage<number>().run(i, () => undefined);
        expect(control.count()).toBe(50);
      } finally {
        control.restore();
      }
    } finally {
      owned.restore();
    }
  });
});
