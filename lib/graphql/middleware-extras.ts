/**
 * What is kept of a field middleware's input beyond what the operation selects: the middleware
 * runs again on a replay over what was stored, and may read any of its input (a filter by an
 * item's unselected `deleted`: adversary 75b), so its unselected fields are kept too, within a
 * budget (see `fitExtras`).
 */
import { keptBytes } from './kept-data.js';

/**
 * The bytes (UTF-8, as stored) of unselected fields kept for field middleware in one stored
 * answer. A field the operation does not select does not count against `maxResponseBytes` (the
 * docs' promise): kept without a bound, one large unselected column (a 1.2 MB avatar) made the
 * answer too large to store, where the app answers without the library (adversary 75c). Past
 * the budget a field is stored without it, and the replay's middleware does not see it (a loss
 * logged, naming it). A quarter of the default `maxResponseBytes` (1 MiB): room for the rows a
 * middleware filters or masks by, never most of the answer's room. Less where the route's own
 * limit leaves less after the selected answer (adversary 75d: see `placeExtras` in
 * wire-value.ts).
 */
export const MIDDLEWARE_EXTRAS_BYTES = 256 * 1024;

/** The extras kept within the budget, those left out, and the budget left. */
export interface FittedExtras {
  kept: Record<string, unknown>;
  dropped: string[];
  remaining: number;
}

/**
 * The extras (by name) that fit in `remaining` bytes, taken in order, each counted by the UTF-8
 * bytes it is stored as (see `keptBytes`): a field too large for what is left is dropped, a
 * smaller one after it still kept.
 */
export function fitExtras(
  extras: Readonly<Record<string, unknown>>,
  remaining: number,
  sizeOf: (value: unknown) => number = keptBytes,
): FittedExtras {
  const kept: Record<string, unknown> = {};
  const dropped: string[] = [];
  for (const [name, value] of Object.entries(extras)) {
    const size = sizeOf(value);
    if (size > remaining) {
      dropped.push(name);
      continue;
    }
    kept[name] = value;
    remaining -= size;
  }
  return { kept, dropped, remaining };
}

/**
 * The values of the fields named that `source` gives through a getter (its class's, or its
 * own), read once: a computed `@Field() get deleted()` is a field the middleware reads as any
 * other (adversary 75c: kept as own data only, the replay's filter found no `deleted`). A
 * getter that throws, a method and a Promise (a lazy relation loading) are left out: a
 * middleware awaiting one reads nothing the walk could store as it was.
 */
export function getterFields(source: object, names: Iterable<string>): Record<string, unknown> {
  const read: Record<string, unknown> = {};
  for (const name of names) {
    if (!throughGetter(source, name)) continue;
    let value: unknown;
    try {
      value = (source as Record<string, unknown>)[name];
    } catch {
      continue;
    }
    if (typeof value === 'function') continue;
    if (isThenable(value)) {
      // Not awaited, and nobody else may: its failure must not be an unhandled rejection.
      Promise.resolve(value).catch(() => undefined);
      continue;
    }
    read[name] = value;
  }
  return read;
}

/**
 * A field middleware's input that is a container it maps to a list (a `Map`, a `Set`, a
 * record), each of its object values given, as own data, the fields named that it gives through
 * getters: kept for the replay as its own data, a value of a class loses its getters, and a
 * selected computed field (`get totalCents()`) would be gone when GraphQL reads the list the
 * replay's middleware makes (adversary 75c: a non-null field answered null). The container
 * keeps its shape (the middleware maps it again); the resolver's own is not changed.
 */
export function withGetterFields(container: object, names: readonly string[]): object {
  const withFields = (item: unknown): unknown => {
    if (typeof item !== 'object' || item === null) return item;
    const read = getterFields(item, names);
    if (Object.keys(read).length === 0) return item;
    const copy = Object.create(Object.getPrototypeOf(item) as object | null) as object;
    Object.defineProperties(copy, Object.getOwnPropertyDescriptors(item));
    for (const [name, value] of Object.entries(read)) {
      Object.defineProperty(copy, name, {
        value,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return copy;
  };
  if (container instanceof Map) {
    return new Map([...container].map(([key, item]) => [key, withFields(item)]));
  }
  if (container instanceof Set) return new Set([...container].map(withFields));
  const prototype = Object.getPrototypeOf(container) as unknown;
  if (prototype !== null && prototype !== Object.prototype) return container;
  const record: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(container)) {
    Object.defineProperty(record, key, {
      value: withFields(item),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return record;
}

/** Whether reading `name` of the value calls a getter (its own, or its class's). */
function throughGetter(source: object, name: string): boolean {
  for (let at: object | null = source; at; at = Object.getPrototypeOf(at) as object | null) {
    const descriptor = Object.getOwnPropertyDescriptor(at, name);
    if (descriptor) return descriptor.get !== undefined;
  }
  return false;
}

function isThenable(value: unknown): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}
