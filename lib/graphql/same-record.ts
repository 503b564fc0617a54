/**
 * One object answered at several places of an answer (a cart holding the one product five
 * times, as a DataLoader gives the one cached entity for each repeated id; an order's
 * `primary` line, also `lines[0]`) is walked once per place, and each walk builds a record of
 * its own data for the resolvers under it (`__parent`, `__kept`: wire-value.ts). Written as a
 * node each, the one object's data was stored once per place: 50 kB at five places counted
 * 250 kB against `maxResponseBytes` (adversary 109: a replay answering `data: null` once the
 * first places' `__parent`s were left out, a mutation refused as too large under `__kept`,
 * which is never left out). Where a place's record holds what an earlier place's record of
 * the same object holds, it is that record: one node in the shared graph, each place naming
 * it, so the stored answer grows with the data, not with its places.
 *
 * A record of one object differs between places only where their selections do (an
 * unselected field's data, a field behind middleware's input): those stay records of their
 * own, each what its place's resolvers read.
 */

/**
 * Whether `a` and `b` (records a walk built of one object's own data, each member its own
 * data property, enumerable or not: hidden-members.ts) hold the same: the same own keys (symbols too) in the same order,
 * each the same value by identity (`Object.is`: the object's own values, never copies, so an
 * object inside is the one object, written once however many records reach it).
 */
export function sameRecord(a: object, b: object): boolean {
  if (a === b) return true;
  const keys = Reflect.ownKeys(a);
  const others = Reflect.ownKeys(b);
  if (keys.length !== others.length) return false;
  return keys.every((key, i) => {
    if (key !== others[i]) return false;
    const one = Reflect.getOwnPropertyDescriptor(a, key)!;
    const other = Reflect.getOwnPropertyDescriptor(b, key)!;
    // Only data is compared: an accessor (never written by a walk) is never the same.
    return 'value' in one && 'value' in other && Object.is(one.value, other.value);
  });
}

/**
 * The record to write for `source` at one more place: an earlier place's record of it
 * (`known`, by object) that holds the same (`sameRecord`), else `record`, noted for the places
 * after. Few records per object: as many as its places' selections differ.
 */
export function recordOnce<T extends object>(
  known: WeakMap<object, T[]>,
  source: object,
  record: T,
): T {
  let records = known.get(source);
  if (!records) known.set(source, (records = []));
  const same = records.find((earlier) => sameRecord(earlier, record));
  if (same) return same;
  records.push(record);
  return record;
}
