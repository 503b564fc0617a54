import {
  graphReachedBy,
  movedRef,
  ownBytes,
  parentRef,
  parentRefIndex,
  parentRefSource,
} from './parent-graph.js';
import { hiddenWithin } from './hidden-within.js';
import { leftOutRef, leftOutSource } from './left-out-parent.js';
import { type Graph } from './typed-graph.js';

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
  /** How many parents' data was left out (their `__parent`s). */
  dropped: number;
  /**
   * How many hidden members (own data not enumerable, that no field names) were left out of
   * the parents' data first (hidden-within.ts): a replay's resolver reads `undefined` there.
   */
  hiddenDropped: number;
  /**
   * The objects of `wire` (the copy) that still hold their data, and those left out that
   * still name their own object's node (`{ s }`, left-out-parent.ts): for a second trim.
   */
  holders: object[];
  /** The objects of `wire` (the copy) that hold `pinned.member` (never left out). */
  pinnedHolders: object[];
  /**
   * The answer's shared graph of its parents' data (parent-graph.ts) with only what the
   * parents kept reach, each kept parent's `__parent` naming its node there anew; none where
   * no parent is kept (nor where there was none).
   */
  graph?: Graph;
}

/** A holder of the copy, with what its members weigh and the shared node it names. */
interface Found {
  holder: Record<string, unknown>;
  size: number;
  order: number;
  /** Its node in the shared graph, where its data is there (none: its own, stored before). */
  node?: number;
  /** The node of its own object, where the graph holds it too (`s`: parent-graph.ts). */
  source?: number;
}

/** A holder left out whose own object's node stays in the graph: its `{ s }` under `member`. */
interface LeftOut {
  holder: Record<string, unknown>;
  member: string;
  source: number;
}

/** What `holder`'s `members` take in the answer: `"__parent":`, its data, a comma. */
function membersBytes(holder: Record<string, unknown>, members: readonly string[]): number {
  let size = 0;
  for (const member of members) {
    if (!(member in holder)) continue;
    size += Buffer.byteLength(`${JSON.stringify(member)}:${JSON.stringify(holder[member])},`);
  }
  return size;
}

/** What the shared graph takes in the answer (`,"parentGraph":` and it): none when empty. */
function graphBytes(graph: Graph | undefined): number {
  if (!graph || graph.g.length === 0) return 0;
  return Buffer.byteLength(`,"parentGraph":${JSON.stringify(graph)}`);
}

/**
 * `wire` (JSON, as stored) copied, with the data of the largest `holders` (objects of `wire`,
 * by identity) left out until the answer it is stored in, `over` bytes past the limit, is
 * under it: each left out takes off its `members` (`"__parent":`, its data and the comma
 * beside it: JSON's own text, as the answer is written). Undefined where leaving all of them
 * out is not enough, or where the answer is not over the limit.
 *
 * Where their data is one shared `graph` (each `__parent` a node of it: parent-graph.ts), a
 * holder weighs its members and the nodes only it reaches; a node another parent still kept
 * reaches is never freed (an order every line points back at goes only with the last line).
 * The largest go first, as many at once as are sure to be enough by what only they reach,
 * else the largest alone (then two, four, ...: a few more may go than the fewest that would
 * do), and the weights are taken again (what two shared may now be one's).
 */
export function parentDataWithin(
  wire: unknown,
  holders: readonly object[],
  members: readonly string[],
  over: number,
  graph?: Graph,
  /**
   * Objects of `wire` whose `member` names a node of `graph` that is never left out (`__kept`,
   * which a serializer reads as the answer): what it reaches stays, its index named anew.
   */
  pinned?: { holders: readonly object[]; member: string },
): ParentDataWithin | undefined {
  if (over <= 0) return undefined;
  const marked = new Set(holders);
  const pinnedSet = new Set(pinned?.holders ?? []);
  const pinnedFound: Record<string, unknown>[] = [];
  const copy = JSON.parse(JSON.stringify(wire) ?? 'null') as unknown;
  const found: Found[] = [];
  let leftOut: LeftOut[] = [];
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
    const leftOver = graph
      ? members.find((name) => leftOutSource(object[name]) !== undefined)
      : undefined;
    if (marked.has(original) && leftOver !== undefined) {
      // Left out by a first trim, its own object's node kept: renumbered as the graph shrinks.
      leftOut.push({ holder: object, member: leftOver, source: leftOutSource(object[leftOver])! });
    } else if (marked.has(original)) {
      const size = membersBytes(object, members);
      const ref = graph
        ? members.map((member) => object[member]).find((at) => parentRefIndex(at) !== undefined)
        : undefined;
      const node = parentRefIndex(ref);
      const source = parentRefSource(ref);
      if (size > 0) found.push({ holder: object, size, order: found.length, node, source });
    }
    if (pinnedSet.has(original)) pinnedFound.push(object);
    for (const [name, item] of Object.entries(original as Record<string, unknown>)) {
      if (marked.has(original) && members.includes(name)) continue;
      if (pinnedSet.has(original) && name === pinned?.member) continue;
      if (name in object) visit(item, object[name]);
    }
  };
  visit(wire, copy);
  /** The pinned refs (their node, and their own object's: `s`), as the graph is now. */
  let pinnedRefs = pinnedFound.map((holder) => {
    const node = parentRefIndex(holder[pinned!.member]);
    const source = parentRefSource(holder[pinned!.member]);
    return node === undefined ? undefined : parentRef(node, source);
  });
  const pinnedRoots = () => pinnedRefs.flatMap((ref) => (ref === undefined ? [] : [ref.p]));
  let shared = graph;
  let left = over;
  let dropped = 0;
  let kept = found;
  /** What the kept parents' members and the left-out ones' `{ s }` take in the answer. */
  const keptBytes = () =>
    kept.reduce((sum, item) => sum + item.size, 0) +
    leftOut.reduce((sum, item) => sum + membersBytes(item.holder, members), 0);
  /**
   * Every ref of the copy named anew once the graph keeps only the nodes `moved` maps: a kept
   * parent's `{ p, s }` (and its size), a left-out one's `{ s }` (gone with its node), the
   * pinned ones.
   */
  const renumber = (moved: ReadonlyMap<number, number>) => {
    leftOut = leftOut.flatMap((item) => {
      const ref = leftOutRef(moved, item.source);
      if (!ref) {
        delete item.holder[item.member];
        return [];
      }
      item.holder[item.member] = ref;
      item.source = ref.s;
      return [item];
    });
    // A pinned `__kept` names its own object's node too (an entity's), so moved alike.
    pinnedRefs = pinnedRefs.map((ref) => ref && movedRef(moved, ref));
    pinnedFound.forEach((holder, i) => {
      const ref = pinnedRefs[i];
      if (ref) holder[pinned!.member] = ref;
    });
    for (const item of kept) {
      if (item.node === undefined) continue;
      const now = movedRef(moved, parentRef(item.node, item.source));
      if (!now) continue;
      item.node = now.p;
      item.source = now.s;
      const member = members.find((name) => parentRefIndex(item.holder[name]) !== undefined);
      if (member) item.holder[member] = now;
      item.size = membersBytes(item.holder, members);
    }
  };
  // First the parents' hidden members (own data not enumerable, no field's: a cache an entity
  // keeps out of JSON), member by member, before any parent's enumerable data a resolver reads
  // (adversary 112: a 15 kB hidden cache per row pushed the rows' columns out).
  let hiddenDropped = 0;
  const parentNodes = kept.flatMap(({ node }) => (node === undefined ? [] : [node]));
  const hidden = shared
    ? hiddenWithin(shared, [...parentNodes, ...pinnedRoots()], left)
    : undefined;
  if (hidden) {
    const before = keptBytes() + graphBytes(shared);
    shared = hidden.graph;
    renumber(hidden.moved);
    hiddenDropped = hidden.dropped;
    left -= before - (keptBytes() + graphBytes(shared));
  }
  /** How many go in a round where what only they reach is not sure to be enough. */
  let unsure = 1;
  while (left > 0 && kept.length > 0) {
    const nodes = kept.flatMap(({ node }) => (node === undefined ? [] : [node]));
    // The pinned are roots too: what one reaches is never freed, so never a parent's own.
    const only =
      shared && nodes.length > 0
        ? ownBytes(shared, [...nodes, ...pinnedRoots()])
        : new Map<number, number>();
    const weight = (item: Found) =>
      item.size + (item.node === undefined ? 0 : (only.get(item.node) ?? 0));
    const bySize = kept
      .map((item) => ({ item, weight: weight(item) }))
      .sort((a, b) => b.weight - a.weight || a.item.order - b.item.order);
    /** As many of the largest as are sure to be enough, else the largest alone. */
    const going = new Set<Found>();
    let sure = 0;
    for (const { item, weight: bytes } of bySize) {
      if (sure >= left) break;
      going.add(item);
      sure += bytes;
    }
    if (sure < left) {
      // Not sure to be enough (what they share goes only with the last of them): the largest,
      // twice as many each such round, so that a thousand parents sharing one order take ten
      // rounds of the graph, not a thousand.
      going.clear();
      for (const { item } of bySize.slice(0, unsure)) going.add(item);
      unsure *= 2;
    }
    const before = keptBytes() + graphBytes(shared);
    for (const item of going) {
      const member = members.find((name) => parentRefIndex(item.holder[name]) !== undefined);
      for (const name of members) delete item.holder[name];
      // Its own object's node may stay (kept data reaches it): named alone, as what a replay
      // makes the parent (adversary 109); renumbered or let go below, with the graph.
      if (member && item.source !== undefined) {
        item.holder[member] = { s: item.source };
        leftOut.push({ holder: item.holder, member, source: item.source });
      }
    }
    dropped += going.size;
    kept = kept.filter((item) => !going.has(item));
    if (shared) {
      const still = kept.flatMap(({ node }) => (node === undefined ? [] : [node]));
      // A kept parent's own object's node (`s`) is no root: it stays where what stays reaches
      // it, else it goes (movedRef), as no data a replay reads reaches it (adversary 108: 40
      // lines' nodes, kept for themselves, kept their 160 kB and pushed their own data out).
      const reached = graphReachedBy(shared, [...still, ...pinnedRoots()]);
      shared = still.length > 0 || pinnedRoots().length > 0 ? reached.graph : undefined;
      renumber(reached.moved);
    }
    left -= before - (keptBytes() + graphBytes(shared));
  }
  // Still over with every parent's data out (a pinned `__kept` keeps the graph): the left-out
  // parents' `{ s }` go too, as few as bring it under, rather than no answer stored.
  while (left > 0 && leftOut.length > 0) {
    const item = leftOut.pop()!;
    left -= membersBytes(item.holder, members);
    delete item.holder[item.member];
  }
  if (left > 0) return undefined;
  return {
    wire: copy,
    dropped,
    hiddenDropped,
    holders: [...kept, ...leftOut].map(({ holder }) => holder),
    pinnedHolders: pinnedFound,
    ...(shared ? { graph: shared } : {}),
  };
}
