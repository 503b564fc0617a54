/**
 * The kept own data of app-resolved fields' parents inside middleware outputs
 * (`StoredOutputs.parents`, app-parents.ts) is the parent's whole data, selected or not: an
 * entity's large column no client selects (a 300 kB `biography`) would take the stored answer
 * past `maxResponseBytes`, and then no output at all would be stored (adversary 86). The
 * parents are what a replay may do without (its parent rebuilt from the answer only), the
 * outputs are not: the largest parents are left out first, as few as bring the answer under
 * the limit.
 */

/** The parents kept, and the keys of those left out (largest first). */
export interface ParentsWithin {
  parents: Record<string, unknown>;
  dropped: string[];
}

/**
 * What the `parents` member of a stored answer takes beyond its entries: `,"parents":{}` (13
 * bytes), less the one comma between entries that leaving all of them out does not count
 * twice (each entry is weighed with a comma: see `parentsWithin`).
 */
const WRAPPER_BYTES = Buffer.byteLength(',"parents":{}') - 1;

/**
 * The parents with the largest left out (by their JSON's length) until the answer they are
 * stored in, `over` bytes past the limit with all of them, is under it: each left out takes
 * off its entry, `"key":` and its data, and the comma beside it; all of them left out, the
 * `"parents"` member with them (adversary 89: weighed by their data alone, an answer over by
 * a few bytes more than that dropped every output). Undefined where leaving all of them out
 * is not enough (`over` is more than they weigh), or where the answer is not over the limit
 * (`over <= 0`: nothing to do).
 */
export function parentsWithin(
  parents: Readonly<Record<string, unknown>>,
  over: number,
): ParentsWithin | undefined {
  if (over <= 0) return undefined;
  const sizes = Object.entries(parents)
    .map(([key, data]) => ({
      key,
      size: Buffer.byteLength(JSON.stringify(data) ?? ''),
      entry: Buffer.byteLength(`${JSON.stringify(key)}:${JSON.stringify(data) ?? ''},`),
    }))
    .sort((a, b) => b.size - a.size || (a.key < b.key ? -1 : 1));
  const dropped: string[] = [];
  let left = over;
  for (const { key, entry } of sizes) {
    if (left <= 0) break;
    dropped.push(key);
    left -= entry;
    if (dropped.length === sizes.length) left -= WRAPPER_BYTES;
  }
  if (left > 0) return undefined;
  const kept: Record<string, unknown> = {};
  for (const [key, data] of Object.entries(parents)) {
    if (!dropped.includes(key)) kept[key] = data;
  }
  return { parents: kept, dropped };
}
