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

/** An object literal's (`{ rows: db…stream() }`): not a class's instance, whose identity counts. */
function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

/**
 * `value` with the lazy async iterables it holds bound to the caller's context (`boundHere`):
 * itself, or those one level into an array or an object literal (`[db…stream()]`,
 * `{ rows: db…stream() }`), copied; else `value` as it is, the same object. One level, as a
 * result is seldom deeper, and a deeper walk would copy (and cost) what the app keeps.
 */
export function iterablesBoundHere<T>(value: T): T {
  if (isLazyAsyncIterable(value)) return boundHere(value) as T;
  if (Array.isArray(value)) {
    if (!value.some(isLazyAsyncIterable)) return value;
    return value.map((item: unknown) => (isLazyAsyncIterable(item) ? boundHere(item) : item)) as T;
  }
  if (isPlainObject(value) && Object.values(value).some(isLazyAsyncIterable)) {
    const copy: Record<string, unknown> = {};
    for (const [name, item] of Object.entries(value)) {
      copy[name] = isLazyAsyncIterable(item) ? boundHere(item) : item;
    }
    return copy as T;
  }
  return value;
}

/**
 * `result` with the foreign thenables it holds started here, in the caller's async context:
 * itself, or the elements of an array of them (`lines.map((line) => prisma.event.create(…))`,
 * for the caller's `Promise.all`); the lazy async iterables it holds, or resolves to, are bound
 * to the caller's context (`iterablesBoundHere`). Anything else is as it was.
 */
export function startedInside<T>(result: T): T {
  if (isForeignThenable(result)) return startedHere(result) as T;
  // An async callback's result (adversary 104: `outside(async () => { …; return db…stream(); })`
  // read its stream on the request's connection, refused behind its cursor): what it resolves
  // to is bound here too. `then()` is called here, so its callback runs in this scope.
  if (result instanceof Promise) return result.then(iterablesBoundHere) as T;
  if (Array.isArray(result) && result.some(isForeignThenable)) {
    const started = result.map((item: unknown) =>
      isForeignThenable(item) ? startedHere(item) : item,
    );
    return iterablesBoundHere(started) as T;
  }
  // A lazy async iterable (Kysely's `stream()`) runs where it is iterated: bound here instead.
  return iterablesBoundHere(result);
}
