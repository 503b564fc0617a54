import { boundHere, isLazyAsyncIterable } from './bound-iterable.js';

/**
 * Thenables that are not native Promises: Prisma's queries, Drizzle's and Kysely's builders.
 * They do their work in `then()`, when they are awaited, and in each `then()` for a builder.
 */

/** A thenable that is not a native Promise (whose `then()` may do the work each time). */
export function isForeignThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    !(value instanceof Promise) &&
    typeof (value as { then?: unknown } | null | undefined)?.then === 'function'
  );
}

/**
 * `thenable` as a Promise whose work starts now, in the async context of the caller: its
 * `then()` called here, once, not by whoever awaits it later (elsewhere, or twice).
 */
export function startedHere<T>(thenable: PromiseLike<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    thenable.then(resolve, reject);
  });
}

/**
 * `result` with the foreign thenables it holds started here, in the caller's async context:
 * itself, or the elements of an array of them (`lines.map((line) => prisma.event.create(…))`,
 * for the caller's `Promise.all`); a lazy async iterable is bound to the caller's context
 * (`boundHere`). Anything else is as it was.
 */
export function startedInside<T>(result: T): T {
  if (isForeignThenable(result)) return startedHere(result) as T;
  // A lazy async iterable (Kysely's `stream()`) runs where it is iterated: bound here instead.
  if (isLazyAsyncIterable(result)) return boundHere(result) as T;
  if (Array.isArray(result) && result.some(isForeignThenable)) {
    return result.map((item: unknown) => (isForeignThenable(item) ? startedHere(item) : item)) as T;
  }
  return result;
}
