/**
 * The first answer sees a resolver's object through a Proxy where storing it read a field of
 * it (a getter read once, a list read once: wire-value.ts `over`). GraphQL hands a
 * `@ResolveField()` that Proxy; without the library it is handed the object itself, which the
 * object's own data may reach back to (`line.order.lines[i]` IS the line an ORM loaded). Read
 * through the Proxy, that data gave the raw objects, so `line.order.lines.indexOf(line)` was
 * -1 at the first call, and right on a replay (adversary 108). So every object the Proxy's
 * reads give that the same walk proxied is given as its Proxy (`views`: raw object to the
 * Proxy the first answer has of it): one object is one object to the app's code again.
 */

/**
 * What a read through a first answer's Proxy gives for `value`, read from the resolver's own
 * object: the Proxy of it where the walk made one (`views`), else `value` itself (a leaf, an
 * object the library read nothing of, a function).
 */
export function seenThrough(value: unknown, views: WeakMap<object, object>): unknown {
  if (typeof value !== 'object' || value === null) return value;
  return views.get(value) ?? value;
}

/**
 * Whether a Proxy may give, for a property, another value than its target's (the Proxy's
 * rule: never for a target's own property that is data, non-configurable and read-only).
 * `own` is the target's own descriptor of it, if any.
 */
export function mayAnswerOtherwise(own: PropertyDescriptor | undefined): boolean {
  if (!own || !('value' in own)) return true;
  return own.configurable === true || own.writable === true;
}
