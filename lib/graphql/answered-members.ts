/**
 * The member of a union or an interface each replayed object was answered as, by its place in
 * the operation's answer (response keys and indexes, joined), by the operation's context:
 * graphql-jit tells no field's `typename` (adversary 84), so a field's path under an abstract
 * type is read by the member its parent value actually is, as the replay's `resolveType()`
 * told it (replayed-member.ts), not by every possible member that selects the response key
 * (adversary 89: another member's `@ResolveField()` of the same name counted, the middleware
 * under it run again on a replay).
 */
const byContext = new WeakMap<object, Map<string, string>>();

/** Notes that the object at `place` was answered as `member` (see above). */
export function noteAnsweredMember(
  context: unknown,
  place: readonly (string | number)[],
  member: string,
): void {
  if (typeof context !== 'object' || context === null) return;
  let members = byContext.get(context);
  if (!members) byContext.set(context, (members = new Map()));
  members.set(place.join('.'), member);
}

/** The member the object at `place` was answered as, where it was noted (see above). */
export function answeredMemberAt(
  context: unknown,
  place: readonly (string | number)[],
): string | undefined {
  if (typeof context !== 'object' || context === null) return undefined;
  return byContext.get(context)?.get(place.join('.'));
}
