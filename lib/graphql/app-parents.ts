import { type Kept, keepData, restoreData } from './kept-data.js';
import { defineOwn } from './own-member.js';
import { type ReplayLoss } from './replay-loss.js';

/**
 * The parent of a field the app resolves (a `@ResolveField()`), inside a middleware field's
 * output: a replay rebuilds that output from the first answer (middleware-outputs.ts), which
 * holds only the selected fields, as GraphQL wrote them; the resolver runs again on a replay
 * and reads its parent's own data (an entity's column no client selects: `countryCode`), so
 * that data is kept at the first answer, as the mutation's own value keeps it (wire-value.ts),
 * and given back to the rebuilt parent (adversary 81).
 */

/**
 * The parent's own data, as typed JSON (kept-data.ts): its own enumerable data properties,
 * never a getter, a method or a Promise (nothing is called or loaded: a lazy relation is a
 * getter, its loaded value a Promise), with the members it does not give back as they were
 * (`unfaithful`: a `Decimal`'s methods), for the app's log. Undefined where it has none, or
 * none JSON can hold.
 */
export function keptParent(source: object): Kept | undefined {
  const data: Record<string, unknown> = {};
  for (const name of Object.keys(source)) {
    const own = Object.getOwnPropertyDescriptor(source, name);
    if (!own || !('value' in own)) continue;
    const item: unknown = own.value;
    if (typeof item === 'function' || isThenable(item)) continue;
    defineOwn(data, name, item);
  }
  if (Object.keys(data).length === 0) return undefined;
  try {
    // What typed JSON does not give back as it was (a class's methods) is as it can be.
    return keepData(data);
  } catch {
    // No JSON form (a cycle under an instance of a class): not kept.
    return undefined;
  }
}

/** The kept data back as the rebuilt parent's own (see `keptParent`); empty without it. */
export function parentData(kept: unknown): Record<string, unknown> {
  return kept === undefined ? {} : restoreData(kept);
}

function isThenable(value: unknown): boolean {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as PromiseLike<unknown>).then === 'function'
  );
}

/**
 * What a kept parent of the object type `type` does not give back as it was, as the
 * mutation's own value says it (wire-value.ts): for `warnLosses` (replay-loss.ts).
 */
export function parentLosses(type: string, parent: Kept | undefined): ReplayLoss[] {
  if (!parent || parent.unfaithful.length === 0) return [];
  const what = parent.unfaithful.map((member) => `${member.name} (${member.what})`);
  return [{ type, what: `its data ${what.join(', ')} does not come back as it was` }];
}
