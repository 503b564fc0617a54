/**
 * A parent whose data (`__parent`) is left out for `maxResponseBytes` (parent-data-within.ts)
 * may still be in the stored graph as an object: its own object's node (`s`, parent-graph.ts),
 * which another kept parent's data reaches back to (`line.order.lines[i]` is line 1, its
 * `notes` and `order` with it). Leaving out its `{ p, s }` whole took the `s` too: a replay
 * then built line 1 from its answer alone (`{ id }`), `line.order` undefined, and answered
 * `data: null` where the first answer was whole, with line 1's object stored all along
 * (adversary 109). So it keeps `{ s }` alone while that node stays: a replay makes the parent
 * that node (wire-value.ts `fromWire`, as for a kept one), which costs a few bytes, never the
 * node (no root: it stays only while kept data reaches it, and goes with the last of them).
 */

/** A left-out parent's `__parent`: its own object's node only, no data of its own. */
export interface LeftOutRef {
  s: number;
}

/**
 * The `__parent` a left-out parent keeps once the graph keeps only the nodes `moved` maps (old
 * index to new, graphReachedBy): its own object's node where it is now, none where it went or
 * where it had none (nothing of it left in the graph to be).
 */
export function leftOutRef(
  moved: ReadonlyMap<number, number>,
  source: number | undefined,
): LeftOutRef | undefined {
  if (source === undefined) return undefined;
  const node = moved.get(source);
  return node === undefined ? undefined : { s: node };
}

/**
 * The node a stored left-out `__parent` names (`{ s }` and nothing else), or undefined: a
 * kept one (`{ p, s }`: parentRefSource) and one stored before (its own data, `{ g }` or
 * `{ json }`) are not.
 */
export function leftOutSource(stored: unknown): number | undefined {
  if (typeof stored !== 'object' || stored === null || Array.isArray(stored)) return undefined;
  const keys = Object.keys(stored);
  if (keys.length !== 1 || keys[0] !== 's') return undefined;
  const { s } = stored as { s?: unknown };
  return typeof s === 'number' && Number.isInteger(s) && s >= 0 ? s : undefined;
}
