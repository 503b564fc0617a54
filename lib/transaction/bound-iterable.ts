import { AsyncResource } from 'node:async_hooks';

type Step = (...args: unknown[]) => unknown;

/**
 * A lazy async iterable (Kysely's `stream()`, an async generator): nothing runs when it is
 * made, its work (a `pool.connect()`, a cursor) runs at each `next()`. Not a stream of Node's
 * (pg-query-stream's, already submitted where it was made, with methods of its own).
 */
export function isLazyAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const holder = value as { [Symbol.asyncIterator]?: unknown; pipe?: unknown; then?: unknown };
  return (
    typeof holder[Symbol.asyncIterator] === 'function' &&
    typeof holder.pipe !== 'function' &&
    typeof holder.then !== 'function'
  );
}

/** The steps of an async iterator, whose work is what iterating it runs. */
const STEPS = new Set<PropertyKey>(['next', 'return', 'throw']);

/**
 * `iterable` with its work run in the async context of the caller, wherever it is iterated: its
 * `[Symbol.asyncIterator]()` and each `next()`, `return()`, `throw()` (of the iterable itself,
 * an async generator, or of the iterator it hands out). What `outside()` returns is read outside
 * the request, as it was meant to be (adversary 103: a Kysely stream returned from `outside()`
 * ran on the request's connection where it was iterated, and its writes were refused behind
 * its cursor).
 */
export function boundHere<T extends AsyncIterable<unknown>>(iterable: T): T {
  const here = new AsyncResource('IdempotentTransaction.outside');
  const bound = <O extends object>(target: O): O => {
    const proxy: O = new Proxy(target, {
      get(object, property) {
        const value = Reflect.get(object, property, object) as unknown;
        if (typeof value !== 'function') return value;
        if (STEPS.has(property)) {
          return (...args: unknown[]) => here.runInAsyncScope(value as Step, object, ...args);
        }
        if (property === Symbol.asyncIterator) {
          return () => {
            const iterator = here.runInAsyncScope(value as Step, object) as object;
            // An async generator is its own iterator: the same bound object.
            return iterator === object ? proxy : bound(iterator);
          };
        }
        return (value as Step).bind(object);
      },
    });
    return proxy;
  };
  return bound(iterable);
}
