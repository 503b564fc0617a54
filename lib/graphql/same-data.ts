import { isDeepStrictEqual } from 'node:util';
import { builtInPrototype, classBelow, isNativePrototype, writeGraph } from './typed-graph.js';

/**
 * Whether `a` and `b` are the same data, as `isDeepStrictEqual` tells, where it can tell: never
 * where either holds an object of an app's class (`mayHideState`), unless the two are one
 * value: a scalar parsing a `Zoned` of `#private` fields back into another zone was called the
 * same, so its value was neither kept nor said lost (adversary 105, and 107 where the class had
 * a public member beside them). Node's walk recurses,
 * and a tree some 2,000 levels deep (a JSON scalar's document) overflows its stack (adversary
 * 103: the `RangeError` stored as the mutation's answer); such a pair is told by their typed
 * graphs (typed-graph.ts, written without recursion), equal only where each is plain data
 * the graph gives back exactly and the two are written alike (keys in the same order).
 */
export function sameData(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (mayHideState(a) || mayHideState(b)) return false;
  try {
    return isDeepStrictEqual(a, b);
  } catch (error) {
    // By its name: thrown in Node's own realm, it need not be this realm's `RangeError`.
    if ((error as { name?: unknown } | null)?.name !== 'RangeError') throw error;
    return sameGraphs(a, b);
  }
}

/** `sameData` told by typed graphs: never where either has no typed form (a `toJSON()` cycle). */
function sameGraphs(a: unknown, b: unknown): boolean {
  try {
    const first = writeGraph(a);
    const second = writeGraph(b);
    return (
      first.exact && second.exact && JSON.stringify(first.graph) === JSON.stringify(second.graph)
    );
  } catch {
    return false;
  }
}

/**
 * Whether `value` holds an object `isDeepStrictEqual` cannot look into: an instance of an app's
 * class (a prototype neither `Object.prototype` nor none, nor a bare built-in's), whatever its
 * own members: its state may be where it does not look (`#private` fields, a closure, a
 * `WeakMap`), which nothing outside its class can tell (adversary 107: a `Zoned` of one public
 * `calendar` beside its `#private` zone was "equal" to one of another zone). Walked without
 * recursion, each object once (a tree of any depth, a cycle), in time linear in its size: a
 * Buffer's or a typed array's bytes are never walked, and an array's items are read by index,
 * never by listing its keys (which took 6 s for two 4 MB Buffers, the event loop held).
 */
export function mayHideState(value: unknown): boolean {
  const seen = new Set<object>();
  const pending: object[] = [];
  const push = (item: unknown) => {
    if (typeof item === 'object' && item !== null && !seen.has(item)) pending.push(item);
  };
  push(value);
  while (pending.length > 0) {
    const next = pending.pop() as object;
    if (seen.has(next)) continue;
    seen.add(next);
    if (isOfAppClass(next)) return true;
    // Bytes only (its own members but the indexes are none, as a built-in's).
    if (ArrayBuffer.isView(next)) continue;
    if (Array.isArray(next)) {
      // A getter at an index is read, as `isDeepStrictEqual` reads it.
      for (let i = 0; i < next.length; i += 1) push(next[i]);
      // Its members beside its items (a match's `groups`) are listed only where it is short:
      // listing a long array's keys is the slow part (4 s for 4 million items).
      if (next.length <= LISTED_ARRAY) pushMembers(next, push, next.length);
      continue;
    }
    pushMembers(next, push);
    if (next instanceof Map) {
      for (const [key, item] of next) {
        push(key);
        push(item);
      }
    } else if (next instanceof Set) {
      for (const item of next) push(item);
    }
  }
  return false;
}

/** The longest array whose members beside its items `mayHideState` looks into. */
const LISTED_ARRAY = 10_000;

/** Each own enumerable member's value (an array's past `length` of indexes: its items). */
function pushMembers(of: object, push: (item: unknown) => void, items = 0): void {
  for (const key of Reflect.ownKeys(of)) {
    if (items > 0 && typeof key === 'string' && isIndex(key, items)) continue;
    const descriptor = Object.getOwnPropertyDescriptor(of, key);
    // A getter is not called: what it reads is its object's, looked into already.
    if (descriptor?.enumerable && 'value' in descriptor) push(descriptor.value);
  }
}

/** Whether `key` is one of the first `length` indexes of an array. */
function isIndex(key: string, length: number): boolean {
  return /^(?:0|[1-9]\d*)$/.test(key) && Number(key) < length;
}

/** An object of an app's class: neither plain, nor a bare built-in (a `Date`, a `Map`). */
function isOfAppClass(value: object): boolean {
  const prototype = Object.getPrototypeOf(value) as object | null;
  if (prototype === null || prototype === Object.prototype) return false;
  // Another realm's `Object.prototype` (a Jest sandbox's, a `vm` context's): plain data.
  if (Object.getPrototypeOf(prototype) === null && isNativePrototype(prototype)) return false;
  const base = builtInPrototype(value);
  return base === undefined || classBelow(value, base) !== 'none';
}
