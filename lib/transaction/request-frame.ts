import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * The values the library keeps for the code running now, one per slot: the request's context
 * (`idempotencyStorage`), the transaction its work joins (`transactionScope`), the handler's try
 * (`handlerTries`). A frame is never changed once made: a `run()` makes a new one, the outer
 * frame's values with one slot replaced.
 */
class Frame {
  constructor(
    readonly context: unknown,
    readonly scope: unknown,
    readonly handlerTry: unknown,
  ) {}
}

/** The slots of a frame. */
export type FrameSlot = 'context' | 'scope' | 'handlerTry';

/**
 * The one storage behind the slots. Node.js (before its async context frames) walks the list of
 * every `AsyncLocalStorage` that has run for each promise and async resource the process makes,
 * writing one property per storage on it: three storages entered by every request cost three
 * such writes per promise, one storage costs one, and a request makes hundreds of promises.
 */
const frames = new AsyncLocalStorage<Frame>();

function withSlot(outer: Frame | undefined, slot: FrameSlot, value: unknown): Frame {
  return new Frame(
    slot === 'context' ? value : outer?.context,
    slot === 'scope' ? value : outer?.scope,
    slot === 'handlerTry' ? value : outer?.handlerTry,
  );
}

/**
 * One slot of the shared frame, used as an `AsyncLocalStorage` of its own: `run()`, `exit()`
 * and `getStore()` as the built-in one's, each seeing and changing only its own slot (the
 * others keep what the enclosing code set).
 *
 * @example
 * export const transactionScope = new FrameSlotStorage<JoinableTransaction>('scope');
 * transactionScope.run(transaction, () => work());
 */
export class FrameSlotStorage<T> {
  constructor(private readonly slot: FrameSlot) {}

  /** The value of this slot's nearest enclosing `run()`, unless an `exit()` is nearer. */
  getStore(): T | undefined {
    return frames.getStore()?.[this.slot] as T | undefined;
  }

  /** Runs `callback` (synchronously, as `AsyncLocalStorage.run`) with `value` in this slot. */
  run<R>(value: T, callback: () => R): R {
    return frames.run(withSlot(frames.getStore(), this.slot, value), callback);
  }

  /** Runs `callback` with this slot empty, the others as they are (`AsyncLocalStorage.exit`). */
  exit<R>(callback: () => R): R {
    const outer = frames.getStore();
    if (outer?.[this.slot] === undefined) return callback();
    return frames.run(withSlot(outer, this.slot, undefined), callback);
  }
}
