/**
 * The member a union's or an interface's `resolveType()` told the library ahead of graphql-js
 * (wire-value.ts `memberAhead`), by the operation's context, the object, and the path of the
 * `info` it was told with: graphql-js' own call for the same object at the same field is
 * answered that member, so the app's `resolveType()` runs once per value, as without the
 * library (adversary 116: a counter doubled). By context, so an object an app returns again in
 * a later operation (a cached one) is told by the app's `resolveType()` afresh there.
 */
const byContext = new WeakMap<object, WeakMap<object, Map<string, string>>>();

/** The object a first answer's Proxy stands for, by the Proxy (wire-value.ts `over`). */
const sources = new WeakMap<object, object>();

/** Notes that `view` (a Proxy) stands for `source` to graphql-js. */
export function noteViewOf(view: object, source: object): void {
  sources.set(view, source);
}

/** Notes that `resolveType()` told `member` for `value` at the field path `path`. */
export function noteToldMember(
  context: unknown,
  value: unknown,
  path: readonly (string | number)[],
  member: string,
): void {
  if (typeof context !== 'object' || context === null) return;
  if (typeof value !== 'object' || value === null) return;
  let objects = byContext.get(context);
  if (!objects) byContext.set(context, (objects = new WeakMap()));
  let members = objects.get(value);
  if (!members) objects.set(value, (members = new Map()));
  members.set(path.join('.'), member);
}

/**
 * The member told ahead for `value` (or the object its Proxy stands for) at `path`, where it
 * was (see above); undefined otherwise: the app's `resolveType()` tells it.
 */
export function toldMemberOf(
  context: unknown,
  value: unknown,
  path: readonly (string | number)[],
): string | undefined {
  if (typeof context !== 'object' || context === null) return undefined;
  if (typeof value !== 'object' || value === null) return undefined;
  const objects = byContext.get(context);
  if (!objects) return undefined;
  const key = path.join('.');
  return objects.get(value)?.get(key) ?? objects.get(sources.get(value) ?? value)?.get(key);
}
