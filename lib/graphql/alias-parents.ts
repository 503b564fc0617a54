/**
 * One field GraphQL's default resolver reads (a property) under several response keys inside a
 * replayed middleware output (`b: row { id name } a: row { id nextSeat }`): every alias reads
 * the same object, but the first answer kept its own data (app-parents.ts) only at the keys of
 * the aliases that selected a `@ResolveField()` under it. Each alias is rebuilt over that same
 * kept data, so the kept value (a raw `7` the answer wrote `"7"`) is the one every alias's
 * rebuilt value holds, whichever alias comes first in the merge (merged-aliases.ts; adversary
 * 89). Only the object itself and its list items are shared: a deeper key is a response key of
 * one alias's own selection, which another alias may use for another field.
 */
export function sharedParents(
  parents: Readonly<Record<string, unknown>> | undefined,
  keys: readonly string[],
): Readonly<Record<string, unknown>> | undefined {
  if (!parents || keys.length < 2) return parents;
  let shared: Record<string, unknown> | undefined;
  for (const [at, kept] of Object.entries(parents)) {
    const from = keys.find((key) => at === key || itemsUnder(at, key));
    if (from === undefined) continue;
    const rest = at.slice(from.length);
    for (const to of keys) {
      if (to === from || `${to}${rest}` in parents || (shared && `${to}${rest}` in shared)) {
        continue;
      }
      shared ??= { ...parents };
      shared[`${to}${rest}`] = kept;
    }
  }
  return shared ?? parents;
}

/** Whether `at` is a list item (at any list depth) of the value at `key`. */
function itemsUnder(at: string, key: string): boolean {
  return at.startsWith(`${key}.`) && /^(\.\d+)+$/.test(at.slice(key.length));
}
