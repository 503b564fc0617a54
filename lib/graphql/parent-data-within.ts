/**
 * The own data a mutation's value keeps for the app's resolvers beyond what the answer holds
 * (`PARENT` members, parent-keeping.ts: a selected object's data beyond its selection, an
 * unselected field a retry may add) may be large (an entity's 300 kB `biography`): with it, a
 * stored answer past `maxResponseBytes` would roll the mutation's work back. Those members are
 * what a replay may do without (its resolvers then read the parent the answer holds, as before
 * round 90), as for middleware outputs' parents (parents-within.ts): the largest are left out
 * first, as few as bring the answer under the limit.
 */

/** The wire value with the parents kept, and how many were left out. */
export interface ParentDataWithin {
  wire: unknown;
  dropped: number;
}

/**
 * `wire` (JSON, as stored) with the largest `member` members left out until the answer it is
 * stored in, `over` bytes past the limit, is under it: each left out takes off `"member":`,
 * its data and the comma beside it (JSON's own text, as the answer is written). Undefined
 * where leaving all of them out is not enough, or where the answer is not over the limit.
 */
export function parentDataWithin(
  wire: unknown,
  member: string,
  over: number,
): ParentDataWithin | undefined {
  if (over <= 0) return undefined;
  const copy = JSON.parse(JSON.stringify(wire) ?? 'null') as unknown;
  const holders: { holder: Record<string, unknown>; size: number; order: number }[] = [];
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) {
      for (const item of value) visit(item);
      return;
    }
    if (typeof value !== 'object' || value === null) return;
    const object = value as Record<string, unknown>;
    for (const [name, item] of Object.entries(object)) {
      if (name === member) {
        const size = Buffer.byteLength(`${JSON.stringify(name)}:${JSON.stringify(item)},`);
        holders.push({ holder: object, size, order: holders.length });
      } else {
        visit(item);
      }
    }
  };
  visit(copy);
  holders.sort((a, b) => b.size - a.size || a.order - b.order);
  let left = over;
  let dropped = 0;
  for (const { holder, size } of holders) {
    if (left <= 0) break;
    delete holder[member];
    left -= size;
    dropped++;
  }
  return left > 0 ? undefined : { wire: copy, dropped };
}
