import { keptMember } from './hidden-members.js';

/**
 * A parent's record (its own data for the app's resolvers beyond what the answer holds:
 * `__parent`, wire-value.ts) is written into the answer's shared graph beside the node of the
 * parent's own object, where the graph holds that object too (`s`, parent-graph.ts: a line
 * every `order.raw.lines` reaches back to). Both held the same data: a line's 500-byte hidden
 * cache was stored twice, and the size trim under `maxResponseBytes` (hidden-within.ts) weighed
 * a hidden member by what only it reaches, which a second copy never is: two small caches went
 * before the large snapshot that nothing reads (adversary 114). What this file decides is when
 * the object's node can be the record: its data is the record's, each member the same value,
 * and what it holds more is what the answer holds (its selected fields, which a replay answers
 * from the answer over the node's). Then the parent's `__parent` names that one node.
 */

/**
 * Whether `source`'s own data, written as a node of the graph, holds what `record` holds and
 * nothing a replay would read otherwise: each member of `record` is `source`'s own data member
 * of that key, the same value (by identity) and as enumerable; each other own member of
 * `source` is one the answer holds (`answered`, its properties). A getter is never its data
 * (the graph does not read one); a member under a symbol no other process knows is written by
 * neither.
 */
export function recordInNode(
  record: object,
  source: object,
  answered: ReadonlySet<string>,
): boolean {
  // An object of its own data (a plain one, an instance of a class, one with no prototype: a
  // driver's dictionary-style row, its node written with no prototype either, typed-graph.ts
  // `graphWriter`): an array, a Map, a Date is written as what it is, which its record is not.
  if (Object.prototype.toString.call(source) !== '[object Object]') return false;
  const recordKeys = Reflect.ownKeys(record).filter(isWritten);
  for (const key of recordKeys) {
    const kept = Reflect.getOwnPropertyDescriptor(record, key)!;
    const own = Reflect.getOwnPropertyDescriptor(source, key);
    if (!own || !('value' in kept)) return false;
    if ((own.enumerable === true) !== (kept.enumerable === true)) return false;
    // An own enumerable getter (a computed `label`): the walk read it once into the record, as
    // JSON reads it, and the node holds what the walk read (adversary 116: such a row was
    // written twice, and the size trim left out a cache a resolver reads).
    if (!('value' in own)) {
      if (own.enumerable !== true) return false;
      continue;
    }
    if (!Object.is(own.value, kept.value)) return false;
  }
  const inRecord = new Set<string | symbol>(recordKeys);
  return Reflect.ownKeys(source)
    .filter(isWritten)
    .filter((key) => keptMember(Reflect.getOwnPropertyDescriptor(source, key)!, true) !== 'none')
    .every((key) => inRecord.has(key) || (typeof key === 'string' && answered.has(key)));
}

/** Whether the graph writes a member of this key (a symbol only where registered). */
function isWritten(key: string | symbol): boolean {
  return typeof key === 'string' || Symbol.keyFor(key) !== undefined;
}
