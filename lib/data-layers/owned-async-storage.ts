import { AsyncLocalStorage } from 'node:async_hooks';

/** One `run()` of an owner's: its value, and the frame it ran inside. */
interface Frame {
  owner: OwnedAsyncStorage<unknown>;
  value: unknown;
  outer: Frame | undefined;
}

/**
 * The one storage behind every `OwnedAsyncStorage`. Node.js keeps each `AsyncLocalStorage`
 * that has ever run in a list it never shortens (until `disable()`), and walks that list for
 * every promise and async resource the process makes: a storage made per request (a
 * transaction's turn queue, its subscriber watches) that runs once would make every later
 * promise of the process slower, request after request, and never be freed. Shared, there is
 * one entry in that list however many owners run.
 */
const frames = new AsyncLocalStorage<Frame>();

/**
 * An `AsyncLocalStorage` of an object made many times (per request): `run()` and
 * `getStore()` as the built-in one's, each owner seeing only its own values (the one its
 * nearest enclosing `run()` set, whatever other owners ran in between), all kept in one
 * storage of the process (see `frames`).
 *
 * @example
 * class TurnQueue {
 *   private readonly current = new OwnedAsyncStorage<Turn>();
 *   get within() { return this.current.getStore()?.underWay === true; }
 * }
 */
export class OwnedAsyncStorage<T> {
  /** The value of this owner's nearest enclosing `run()`, if any. */
  getStore(): T | undefined {
    for (let frame = frames.getStore(); frame; frame = frame.outer) {
      if (frame.owner === this) return frame.value as T;
    }
    return undefined;
  }

  /** Runs `callback` (synchronously, as `AsyncLocalStorage.run`) with `value` as this owner's. */
  run<R>(value: T, callback: () => R): R {
    return frames.run({ owner: this, value, outer: frames.getStore() }, callback);
  }
}
