import { type GraphQLOutputType } from 'graphql';
import { type GraphqlModule } from './graphql-module.js';

/**
 * Whether a field middleware's input (the property Nest's `next()` reads) can be stored by
 * walking it with the field's type: anything but a list type, and for a list type an array
 * (or nothing), or a one-shot iterator (see `isOneShot`). Any other value (a jsonb record, a `Map`, a `Set`) is what the middleware maps
 * to the list: walked, it would be made a list it is not (a record wrapped as `[record]`, a
 * Map's entries), which the middleware reads on a replay, and the first answer too where the
 * walked value is given it (adversary 75b). Kept as it is instead (see `walkValue`).
 */
export function fitsListType(
  graphql: Pick<GraphqlModule, 'isListType' | 'isNonNullType'>,
  type: GraphQLOutputType,
  value: unknown,
): boolean {
  const nullable = graphql.isNonNullType(type) ? type.ofType : type;
  if (!graphql.isListType(nullable)) return true;
  return value === null || value === undefined || Array.isArray(value) || isOneShot(value);
}

/**
 * An iterator (a `Map`'s `keys()`, a generator): read, it is gone, so it cannot be kept for
 * the middleware to read again. It is no container the middleware maps either: GraphQL takes
 * it as a list, as the docs promise of any iterable. So it is read once into an array, walked
 * with the list's type, and the first answer's middleware is given that array, the iterator
 * never read twice (adversary 75c: kept, it was stored as `{}`, every replay an error).
 */
export function isOneShot(value: unknown): boolean {
  if (typeof value !== 'object' || value === null || !(Symbol.iterator in value)) return false;
  const iterator = value as { next?: unknown; [Symbol.iterator]: () => unknown };
  return typeof iterator.next === 'function' && iterator[Symbol.iterator]() === value;
}

/**
 * An async iterator (an async generator reading rows in batches): one-shot as a sync one is,
 * so read once into an array for the middleware (adversary 75d: kept as it was, it was stored as
 * `{}`, every replay an error). The middleware given the array may still `for await` it.
 */
export function isAsyncOneShot(value: unknown): boolean {
  if (typeof value !== 'object' || value === null || !(Symbol.asyncIterator in value)) {
    return false;
  }
  const iterator = value as { next?: unknown; [Symbol.asyncIterator]: () => unknown };
  return typeof iterator.next === 'function' && iterator[Symbol.asyncIterator]() === value;
}

/** An async iterator's items, read to its end; rejects with what it throws. */
export async function readAsync(iterator: AsyncIterable<unknown>): Promise<unknown[]> {
  const items: unknown[] = [];
  for await (const item of iterator) items.push(item);
  return items;
}

/**
 * A container the middleware maps to a list (a `Map`, a `Set`, a plain record) with its values
 * that are Promises awaited (a `Map` of lines loaded DataLoader style, whose items GraphQL
 * awaits once they are a list): kept as they were, each is an instance of a class and stored as
 * `{}` (adversary 75d: a replay's lines all empty). Another value is returned as it is; the
 * container given is never changed. Rejects with the first Promise's failure.
 */
export async function settledContainer(container: unknown): Promise<unknown> {
  if (typeof container !== 'object' || container === null) return container;
  const settle = async (item: unknown) => (isPromiseLike(item) ? await item : item);
  if (container instanceof Map) {
    if (![...container.values()].some(isPromiseLike)) return container;
    const entries = await Promise.all(
      [...container].map(async ([key, item]) => [key, await settle(item)] as const),
    );
    return new Map(entries);
  }
  if (container instanceof Set) {
    if (![...container].some(isPromiseLike)) return container;
    return new Set(await Promise.all([...container].map(settle)));
  }
  const prototype = Object.getPrototypeOf(container) as unknown;
  if (prototype !== null && prototype !== Object.prototype) return container;
  const values = Object.values(container);
  if (!values.some(isPromiseLike)) return container;
  // All awaited together: one rejecting leaves none of the others unhandled.
  const settled = await Promise.all(values.map(settle));
  const record: Record<string, unknown> = {};
  for (const [i, key] of Object.keys(container).entries()) {
    Object.defineProperty(record, key, {
      value: settled[i],
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return record;
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}
