/** A step of `isPlainData`'s walk: a value to look at, or an object whose children are done. */
type Step = { look: unknown } | { leave: object };

/**
 * Whether `value` is plain data, which `JSON.stringify` renders as any layer of the app would
 * send it: primitives, arrays, objects of `Object.prototype` (or none), dates. A late answer
 * (the handler settled after a timeout answered for it) is rendered by the library, past the
 * app's interceptors outside `@Idempotent()`: a class instance is what those transform (Nest's
 * `ClassSerializerInterceptor` drops its `@Exclude()`d fields, a `toJSON` shapes it), so
 * rendered here it could replay what the app never sends, a password hash. Such a value is
 * not stored. So is one that holds itself (`JSON.stringify` throws on it). It looks at every
 * value once per place it appears, as `JSON.stringify` does.
 */
export function isPlainData(value: unknown): boolean {
  // The objects on the path from the root to the one looked at: met again there, a cycle.
  const path = new Set<object>();
  const steps: Step[] = [{ look: value }];
  while (steps.length > 0) {
    const step = steps.pop()!;
    if ('leave' in step) {
      path.delete(step.leave);
      continue;
    }
    const next = step.look;
    if (next === null || typeof next !== 'object') {
      if (typeof next === 'function' || typeof next === 'symbol') return false;
      continue;
    }
    if (next instanceof Date) continue;
    if (path.has(next)) return false;
    const prototype = Object.getPrototypeOf(next) as unknown;
    let children: unknown[];
    if (Array.isArray(next)) {
      if (prototype !== Array.prototype) return false;
      children = next as unknown[];
    } else {
      if (prototype !== Object.prototype && prototype !== null) return false;
      if (typeof (next as { toJSON?: unknown }).toJSON === 'function') return false;
      children = Object.values(next);
    }
    path.add(next);
    steps.push({ leave: next });
    for (const child of children) steps.push({ look: child });
  }
  return true;
}
