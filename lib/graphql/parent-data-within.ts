/**
 * The own data a mutation's value keeps for the app's resolvers beyond what the answer holds
 * (`PARENT` members, parent-keeping.ts: a selected object's data beyond its selection, an
 * unselected field a retry may add, its data that is no field) may be large (an entity's
 * 300 kB `biography`): with it, a stored answer past `maxResponseBytes` would roll the
 * mutation's work back. Those members are what a replay may do without (its resolvers then
 * read the parent the answer holds, as before round 90), as for middleware outputs' parents
 * (parents-within.ts): the largest are left out first, as few as bring the answer under the
 * limit.
 *
 * Only where the library wrote them (`holders`, noted while writing the wire: see
 * `StoredValue.parents`), never a member of that name in the app's own data (a JSON scalar's
 * document whose nodes link up with `__parent`: adversary 93).
 */

/** The wire value with the parents kept, how many were left out, and the holders left. */
export interface ParentDataWithin {
  wire: unknown;
  dropped: number;
  /** The objects of `wire` (the copy) that still hold their data. */
  holders: object[];
}

/**
 * `wire` (JSON, as stored) copied, with the data of the largest `holders` (objects of `wire`,
 * by identity) left out until the answer it is stored in, `over` bytes past the limit, is
 * under it: each left out takes off its `members` (`"__parent":`, its data and the comma
 * beside it: JSON's own text, as the answer is written). Undefined where leaving all of them
 * out is not enough, or where the answer is not over the limit.
 */
export function parentDataWithin(
  wire: unknown,
  holders: readonly object[],
  members: readonly string[],
  over: number,
): ParentDataWithin | undefined {
  if (over <= 0) return undefined;
  const marked = new Set(holders);
  const copy = JSON.parse(JSON.stringify(wire) ?? 'null') as unknown;
  const found: { holder: Record<string, unknown>; size: number; order: number }[] = [];
  /** `original` and its copy walked side by side: the copy's holders are where the original's are. */
  const visit = (original: unknown, copied: unknown): void => {
    if (typeof original !== 'object' || original === null) return;
    if (typeof copied !== 'object' || copied === null) return;
    if (Array.isArray(original)) {
      if (!Array.isArray(copied)) return;
      original.forEach((item, i) => visit(item, copied[i]));
      return;
    }
    const object = copied as Record<string, unknown>;
    if (marked.has(original)) {
      let size = 0;
      for (const member of members) {
        if (!(member in object)) continue;
        size += Buffer.byteLength(`${JSON.stringify(member)}:${JSON.stringify(object[member])},`);
      }
      if (size > 0) found.push({ holder: object, size, order: found.length });
    }
    for (const [name, item] of Object.entries(original as Record<string, unknown>)) {
      if (marked.has(original) && members.includes(name)) continue;
      if (name in object) visit(item, object[name]);
    }
  };
  visit(wire, copy);
  const bySize = [...found].sort((a, b) => b.size - a.size || a.order - b.order);
  let left = over;
  let dropped = 0;
  const gone = new Set<object>();
  for (const { holder, size } of bySize) {
    if (left <= 0) break;
    for (const member of members) delete holder[member];
    gone.add(holder);
    left -= size;
    dropped++;
  }
  if (left > 0) return undefined;
  return {
    wire: copy,
    dropped,
    holders: found.map(({ holder }) => holder).filter((holder) => !gone.has(holder)),
  };
}
