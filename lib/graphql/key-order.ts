/**
 * The order of a stored object's own keys (`KEYS` in wire-value.ts). A replay rebuilds an
 * object from its wire form: its stored fields first (in the selection's order, at their
 * places), then its own data for the app's resolvers (`PARENT`), then what its wire form would
 * change (`KEPT`). A resolver that reads its parent in order (`JSON.stringify(parent)` hashed
 * into a version tag, `Object.keys(parent)`) would read another object where the first call's
 * own keys came in another order (adversary 101: a row `{ id, title, body }` selected as
 * `{ id body etag }` came back `{ id, body, title }`, and its etag changed). So the first
 * call's order is stored where it differs from the rebuilt one, and the replay puts its own
 * keys back in it.
 */

/** The keys in the order a replay writes them, each once (a later write keeps its place). */
export function rebuiltOrder(...written: readonly (readonly string[])[]): string[] {
  return [...new Set(written.flat())];
}

/**
 * The first call's order of the keys a replay rebuilds (`sourceKeys`: the object's own keys
 * as the resolver returned it), to be stored; undefined where the replay's own order
 * (`rebuilt`: see `rebuiltOrder`) is already it, so nothing is stored.
 */
export function storedKeyOrder(
  sourceKeys: readonly string[],
  rebuilt: readonly string[],
): string[] | undefined {
  const rebuiltSet = new Set(rebuilt);
  const sourceSet = new Set(sourceKeys);
  const first = sourceKeys.filter((key) => rebuiltSet.has(key));
  const replayed = rebuilt.filter((key) => sourceSet.has(key));
  return first.length === replayed.length && first.every((key, i) => key === replayed[i])
    ? undefined
    : first;
}

/**
 * The replay's own keys (`current`, as rebuilt) in the stored order (`stored`): the stored
 * keys it has first, in that order, then the others it has (the first call had none of them:
 * a selected field it lacked, answered null) in their own order. A record stored without an
 * order (before it was stored, or where none differed) keeps the rebuilt order.
 */
export function orderedKeys(current: readonly string[], stored: unknown): string[] {
  if (!Array.isArray(stored)) return [...current];
  const has = new Set(current);
  const first = [...new Set(stored.filter((key): key is string => typeof key === 'string'))];
  const placed = first.filter((key) => has.has(key));
  const placedSet = new Set(placed);
  return [...placed, ...current.filter((key) => !placedSet.has(key))];
}

/**
 * Puts `value`'s own string keys in `order` (see `orderedKeys`): each property deleted and
 * defined again with its own descriptor, as only the order of definition orders them. Every
 * property of a rebuilt object is configurable; one that is not is left where it is.
 */
export function reorderOwnKeys(value: object, stored: unknown): void {
  if (!Array.isArray(stored)) return;
  const current = Object.getOwnPropertyNames(value);
  const order = orderedKeys(current, stored);
  if (order.every((key, i) => key === current[i])) return;
  const descriptors = order.map((key) => [key, Object.getOwnPropertyDescriptor(value, key)!]);
  for (const [key, descriptor] of descriptors as [string, PropertyDescriptor][]) {
    if (!descriptor.configurable) continue;
    delete (value as Record<string, unknown>)[key];
    Object.defineProperty(value, key, descriptor);
  }
}
