import { type ParentEntry, movedEntry } from './parent-entry.js';
import { graphReachedBy, ownBytes, parentRefIndex } from './parent-graph.js';
import { type Graph } from './typed-graph.js';

/**
 * The kept own data of app-resolved fields' parents inside middleware outputs
 * (`StoredOutputs.parents`, app-parents.ts) is the parent's whole data, selected or not: an
 * entity's large column no client selects (a 300 kB `biography`) would take the stored answer
 * past `maxResponseBytes`, and then no output at all would be stored (adversary 86). The
 * parents are what a replay may do without (its parent rebuilt from the answer only), the
 * outputs are not: the largest parents are left out first, as few as bring the answer under
 * the limit.
 *
 * Their data is one shared graph (`outputsGraph`: each parent's entry a `{ p }` naming its
 * node, app-parents.ts): a parent weighs its entry and the nodes only it reaches, and a node
 * a parent still kept reaches is never freed (an order every line points back at goes only
 * with the last line), as for the mutation value's own parents (parent-data-within.ts).
 */

/** The parents kept, the keys of those left out (largest first), and their graph now. */
export interface ParentsWithin {
  parents: Record<string, unknown>;
  dropped: string[];
  /** What the kept parents reach of the shared graph, their entries naming it anew. */
  graph?: Graph;
}

/** The member of the stored answer that holds the outputs' parents' graph (field-answer.ts). */
const GRAPH_MEMBER = 'outputsGraph';

/** What a member of the stored answer takes: `,"name":` and its JSON; none when absent. */
function memberBytes(name: string, value: unknown): number {
  return value === undefined
    ? 0
    : Buffer.byteLength(`,${JSON.stringify(name)}:`) + jsonBytes(value);
}

function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value) ?? '');
}

/** What the parents and their graph take in the stored answer (each member none when empty). */
function storedBytes(parents: Readonly<Record<string, unknown>>, graph: Graph | undefined): number {
  const some = Object.keys(parents).length > 0;
  return (
    (some ? memberBytes('parents', parents) : 0) +
    (some && graph ? memberBytes(GRAPH_MEMBER, graph) : 0)
  );
}

/**
 * The parents with the largest left out until the answer they are stored in, `over` bytes
 * past the limit with all of them, is under it: each left out takes off its entry (`"key":`,
 * its data or `{ p }`, the comma beside it) and, in a shared `graph`, the nodes no parent kept
 * reaches; all of them left out, the `"parents"` member (and the graph) with them (adversary
 * 89). The largest by what only they free go first, as many at once as are sure to be enough,
 * else the largest alone (then two, four, ...), and the weights are taken again (what two
 * shared may now be one's). Undefined where leaving all of them out is not enough (`over` is
 * more than they weigh), or where the answer is not over the limit (`over <= 0`).
 */
export function parentsWithin(
  parents: Readonly<Record<string, unknown>>,
  over: number,
  graph?: Graph,
): ParentsWithin | undefined {
  if (over <= 0) return undefined;
  const kept: Record<string, unknown> = { ...parents };
  let shared = graph;
  const dropped: string[] = [];
  let left = over;
  /** How many go in a round where what only they free is not sure to be enough. */
  let unsure = 1;
  while (left > 0 && Object.keys(kept).length > 0) {
    const before = storedBytes(kept, shared);
    const nodes = Object.values(kept).flatMap((at) => nodeOf(at, shared));
    const only = shared && nodes.length > 0 ? ownBytes(shared, nodes) : new Map<number, number>();
    const weighed = Object.entries(kept)
      .map(([key, data]) => ({
        key,
        size:
          jsonBytes(data) + nodeOf(data, shared).reduce((sum, n) => sum + (only.get(n) ?? 0), 0),
        entry: Buffer.byteLength(`${JSON.stringify(key)}:${JSON.stringify(data) ?? ''},`),
      }))
      .sort((a, b) => b.size - a.size || (a.key < b.key ? -1 : 1));
    let going: string[] = [];
    let sure = 0;
    for (const { key, size, entry } of weighed) {
      if (sure >= left) break;
      going.push(key);
      // Its entry, and the nodes only it reaches (its data's own weight, where not shared).
      sure += entry + (size - jsonBytes(kept[key]));
    }
    // All of them: the members' names and braces go too.
    if (going.length === weighed.length) sure = before;
    if (sure < left) {
      // Not sure to be enough (what they share goes only with the last of them): twice as
      // many each such round, so that a thousand parents sharing one order take ten rounds.
      going = weighed.slice(0, unsure).map(({ key }) => key);
      unsure *= 2;
    }
    for (const key of going) delete kept[key];
    dropped.push(...going);
    if (shared) shared = keptReach(kept, shared);
    left -= before - storedBytes(kept, shared);
  }
  if (left > 0) return undefined;
  return {
    parents: kept,
    dropped,
    ...(shared && Object.keys(kept).length > 0 ? { graph: shared } : {}),
  };
}

/** The node a kept entry names in `graph`, if it is one (none: its own data, stored before). */
function nodeOf(kept: unknown, graph: Graph | undefined): number[] {
  const node = graph ? parentRefIndex(kept) : undefined;
  return node === undefined ? [] : [node];
}

/**
 * `graph` with only what the entries of `parents` reach (in place: each `{ p }` named anew);
 * none where no entry names a node.
 */
function keptReach(parents: Record<string, unknown>, graph: Graph): Graph | undefined {
  const roots = Object.values(parents).flatMap((at) => nodeOf(at, graph));
  if (roots.length === 0) return undefined;
  const { graph: reached, moved } = graphReachedBy(graph, roots);
  for (const [key, at] of Object.entries(parents)) {
    if (parentRefIndex(at) === undefined) continue;
    // Its own object's node too (`s`, where still reached) and its marks (app-parents.ts).
    const to = movedEntry(moved, at as ParentEntry);
    if (to !== undefined) parents[key] = to;
  }
  return reached;
}
