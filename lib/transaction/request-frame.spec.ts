import { AsyncLocalStorage } from 'node:async_hooks';
import { FrameSlotStorage } from './request-frame.js';

const tick = () => new Promise((resolve) => setImmediate(resolve));

/** A step run inside the previous one: `run` a value in a slot, or `exit` it. */
type Step = ['run' | 'exit', 0 | 1 | 2, string?];

/**
 * Each nesting of steps, run on the three slots and on three built-in storages side by side,
 * with an await between steps: the slots must see what the built-in storages see.
 */
const nestings: [string, Step[]][] = [
  ['one slot', [['run', 0, 'a']]],
  [
    'each slot once',
    [
      ['run', 0, 'a'],
      ['run', 1, 'b'],
      ['run', 2, 'c'],
    ],
  ],
  [
    'a slot run again inside',
    [
      ['run', 0, 'a'],
      ['run', 1, 'b'],
      ['run', 0, 'a2'],
    ],
  ],
  [
    'an exit keeps the other slots',
    [
      ['run', 0, 'a'],
      ['run', 1, 'b'],
      ['exit', 0],
    ],
  ],
  [
    'a run after an exit',
    [
      ['run', 1, 'b'],
      ['exit', 1],
      ['run', 1, 'b2'],
      ['run', 2, 'c'],
    ],
  ],
  [
    'an exit of an empty slot',
    [
      ['exit', 2],
      ['run', 0, 'a'],
      ['exit', 2],
    ],
  ],
];

async function nest(
  steps: Step[],
  storages: { run(v: string, f: () => unknown): unknown; exit(f: () => unknown): unknown }[],
  look: () => void,
): Promise<void> {
  look();
  const [step, ...rest] = steps;
  if (!step) return;
  const [kind, slot, value] = step;
  const inner = async () => {
    await tick();
    await nest(rest, storages, look);
    look();
  };
  await (kind === 'run' ? storages[slot].run(value!, inner) : storages[slot].exit(inner));
  look();
}

describe('FrameSlotStorage', () => {
  it.each(nestings)('sees what three AsyncLocalStorage would see: %s', async (_, steps) => {
    const slots = [
      new FrameSlotStorage<string>('context'),
      new FrameSlotStorage<string>('scope'),
      new FrameSlotStorage<string>('handlerTry'),
    ];
    const builtIn = [0, 1, 2].map(() => new AsyncLocalStorage<string>());
    const seenSlots: unknown[] = [];
    const seenBuiltIn: unknown[] = [];
    await nest(steps, slots, () => seenSlots.push(slots.map((s) => s.getStore())));
    await nest(steps, builtIn, () => seenBuiltIn.push(builtIn.map((s) => s.getStore())));
    expect(seenSlots).toEqual(seenBuiltIn);
    expect(slots.map((s) => s.getStore())).toEqual([undefined, undefined, undefined]);
  });

  it('keeps concurrent runs of one slot apart, and returns what the callback returns', async () => {
    const slot = new FrameSlotStorage<number>('scope');
    const seen = await Promise.all(
      [1, 2, 3].map((n) =>
        slot.run(n, async () => {
          await tick();
          return slot.getStore();
        }),
      ),
    );
    expect(seen).toEqual([1, 2, 3]);
    expect(slot.exit(() => 7)).toBe(7);
  });
});
