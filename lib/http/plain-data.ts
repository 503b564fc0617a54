/** How many values `isPlainData` looks at before it gives up (and answers false). */
const MAX_NODES = 10_000;

/**
 * Whether `value` is plain data, which `JSON.stringify` renders as any layer of the app would
 * send it: primitives, arrays, objects of `Object.prototype` (or none), dates. A late answer
 * (the handler settled after a timeout answered for it) is rendered by the library, past the
 * app's interceptors outside `@Idempotent()`: a class instance is what those transform (Nest's
 * `ClassSerializerInterceptor` drops its `@Exclude()`d fields, a `toJSON` shapes it), so
 * rendered here it could replay what the app never sends, a password hash. Such a value is
 * not stored. So is one too large to look through (over `MAX_NODES` values).
 */
export function isPlainData(value: unknown): boolean {
  let seen = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const next = stack.pop();
    if (++seen > MAX_NODES) return false;
    if (next === null || typeof next !== 'object') {
      if (typeof next === 'function' || typeof next === 'symbol') return false;
      continue;
    }
    if (next instanceof Date) continue;
    const prototype = Object.getPrototypeOf(next) as unknown;
    if (Array.isArray(next)) {
      if (prototype !== Array.prototype) return false;
      stack.push(...(next as unknown[]));
      continue;
    }
    if (prototype !== Object.prototype && prototype !== null) return false;
    if (typeof (next as { toJSON?: unknown }).toJSON === 'function') return false;
    stack.push(...Object.values(next));
  }
  return true;
}
