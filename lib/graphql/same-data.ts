import { isDeepStrictEqual } from 'node:util';
import { builtInPrototype, classBelow, isNativePrototype, writeGraph } from './typed-graph.js';

/**
 * Whether `a` and `b` are the same data, as `isDeepStrictEqual` tells, where it can tell: never
 * where either holds state it cannot see (`hidesState`), unless the two are one value: a scalar
 * parsing a `Zoned` of `#private` fields back into another zone was called the same, so its
 * value was neither kept nor said lost (adversary 105). Node's walk recurses,
 * and a tree some 2,000 levels deep (a JSON scalar's document) overflows its stack (adversary
 * 103: the `RangeError` stored as the mutation's answer); such a pair is told by their typed
 * graphs (typed-graph.ts, written without recursion), equal only where each is plain data
 * the graph gives back exactly and the two are written alike (keys in the same order).
 */
export function sameData(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (hidesState(a) || hidesState(b)) return false;
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
 * class (a prototype neither `Object.prototype` nor none, nor a bare built-in's) with no own
 * enumerable member, whose state is then where it does not look (`#private` fields, a
 * closure, a `WeakMap`): any two such are "equal" to it. Walked without recursion, each object
 * once (a tree of any depth, a cycle).
 */
export function hidesState(value: unknown): boolean {
  const seen = new Set<object>();
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const next = pending.pop();
    if (typeof next !== 'object' || next === null || seen.has(next)) continue;
    seen.add(next);
    const keys = Reflect.ownKeys(next).filter((key) =>
      Object.prototype.propertyIsEnumerable.call(next, key),
    );
    if (keys.length === 0 && isOfAppClass(next)) return true;
    for (const key of keys) {
      const descriptor = Object.getOwnPropertyDescriptor(next, key);
      // A getter is not called: what it reads is its object's, looked into already.
      if (descriptor && 'value' in descriptor) pending.push(descriptor.value);
    }
    if (next instanceof Map) {
      for (const [key, item] of next) pending.push(key, item);
    } else if (next instanceof Set) {
      for (const item of next) pending.push(item);
    }
  }
  return false;
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
