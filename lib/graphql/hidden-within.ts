import { readMemberKey } from './hidden-members.js';
import { graphReachedBy } from './parent-graph.js';
import { type Graph, membersStart, renamedRefs } from './typed-graph.js';

/**
 * A parent's own data that is not enumerable is kept for its resolvers (hidden-members.ts:
 * a back-reference kept out of JSON, adversary 111). So is, alike, a large cache an entity
 * keeps out of JSON precisely so that no copy holds it (the raw row an ORM keeps for dirty
 * checking): 15 kB a row, which no field names. Where the stored answer would be past
 * `maxResponseBytes`, leaving out the largest parents' data whole (parent-data-within.ts)
 * took their enumerable columns a `@ResolveField()` reads with the cache nothing reads, and a
 * committed mutation replayed `data: null` (adversary 112). What this file decides is which
 * hidden members go first: before any parent's enumerable data, one member at a time, the
 * largest first (by what only it reaches), as few as bring the answer under the limit. A
 * member left out is absent on a replay's object (its resolver reads `undefined`), as the
 * app's log and the guide say.
 */

/** A hidden member of a node: where its key is in the node, and what leaving it out frees. */
export interface HiddenMember {
  node: number;
  /** The index of its key in the node (its cell is the next). */
  at: number;
  /** Its key and cell in the node's JSON, and the nodes only it reaches (see `hiddenMembers`). */
  bytes: number;
}

/** The graph with hidden members left out, where its nodes went, and how many went. */
export interface HiddenWithin {
  graph: Graph;
  /** Old index to new, for each node kept (as `graphReachedBy`'s, over all rounds). */
  moved: Map<number, number>;
  /** How many hidden members were left out. */
  dropped: number;
}

/** Whether a node's written key is a hidden member's (`['-', key, writable]`). */
function isHiddenKey(written: unknown): boolean {
  return !readMemberKey(written).enumerable;
}

/** The node a cell names (`['@', i]`), if it names one. */
function refOf(cell: unknown): number | undefined {
  return Array.isArray(cell) && cell[0] === '@' && typeof cell[1] === 'number'
    ? cell[1]
    : undefined;
}

/** What a JSON value takes in the stored answer. */
function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value) ?? 'null');
}

/** A node's refs, those its hidden members' cells name apart from the others. */
function edgesOf(node: unknown): { plain: number[]; hidden: { at: number; to?: number }[] } {
  const all: number[] = [];
  renamedRefs(node, (index) => {
    all.push(index);
    return index;
  });
  const start = membersStart(node);
  const hidden: { at: number; to?: number }[] = [];
  if (start === undefined || !Array.isArray(node)) return { plain: all, hidden };
  for (let at = start; at + 1 < node.length; at += 2) {
    if (isHiddenKey(node[at])) hidden.push({ at, to: refOf(node[at + 1]) });
  }
  // Each hidden cell's ref taken off once: what is left is reached by enumerable data.
  const plain = [...all];
  for (const { to } of hidden) {
    if (to === undefined) continue;
    const i = plain.indexOf(to);
    if (i !== -1) plain.splice(i, 1);
  }
  return { plain, hidden };
}

/**
 * The hidden members of the nodes `roots` reach, each with what leaving it out frees at least:
 * its key and cell (and their commas), and the nodes it alone reaches that no enumerable data
 * of the roots reaches (a node two hidden members reach, as an order every line's hidden
 * `order` names, is neither's: it goes with the last of them). A hidden member inside what
 * another reaches weighs its own (a cache on that order is the cache's, not the back-reference's).
 */
export function hiddenMembers(graph: Graph, roots: readonly number[]): HiddenMember[] {
  const nodes = graph.g;
  const edges = nodes.map(edgesOf);
  const inRange = (index: number) => index >= 0 && index < nodes.length;
  // Reached at all (where hidden members are candidates), and by enumerable data alone.
  const reached = graphReachedBy(graph, roots).moved;
  const plainReached = new Array<boolean>(nodes.length).fill(false);
  const stack = roots.filter(inRange);
  for (const root of stack) plainReached[root] = true;
  while (stack.length > 0) {
    for (const next of edges[stack.pop()!].plain) {
      if (!inRange(next) || plainReached[next]) continue;
      plainReached[next] = true;
      stack.push(next);
    }
  }
  const found: HiddenMember[] = [];
  /** By node: -1 none yet, a hidden member's index in `found`, -2 more than one. */
  const owner = new Array<number>(nodes.length).fill(-1);
  nodes.forEach((node, index) => {
    if (!reached.has(index)) return;
    for (const { at, to } of edges[index].hidden) {
      const member = found.length;
      const cell = (node as unknown[])[at + 1];
      found.push({
        node: index,
        at,
        bytes: jsonBytes((node as unknown[])[at]) + jsonBytes(cell) + 2,
      });
      if (to === undefined || !inRange(to) || plainReached[to]) continue;
      // What it reaches by enumerable data from there (a hidden member further in starts its own).
      const marking = [to];
      owner[to] = owner[to] === -1 || owner[to] === member ? member : -2;
      while (marking.length > 0) {
        const from = marking.pop()!;
        for (const next of edges[from].plain) {
          if (!inRange(next) || plainReached[next]) continue;
          const now = owner[next] === -1 || owner[next] === member ? member : -2;
          if (now === owner[next]) continue;
          owner[next] = now;
          marking.push(next);
        }
      }
    }
  });
  owner.forEach((member, index) => {
    if (member >= 0) found[member].bytes += jsonBytes(nodes[index]) + 1;
  });
  return found;
}

/**
 * `graph` with the hidden members of what `roots` reach left out, the largest first, until
 * `over` bytes of it are freed: as many at once as are sure to be enough by what only they
 * reach, else the largest alone (then two, four, ...), weighed again each round. The nodes no
 * root reaches any more go (renumbered, `moved`). Undefined where there is nothing to do (not
 * over, or no hidden member); where leaving all of them out is not enough, all are left out
 * (what is left to free is then the parents' data, parent-data-within.ts).
 */
export function hiddenWithin(
  graph: Graph,
  roots: readonly number[],
  over: number,
): HiddenWithin | undefined {
  if (over <= 0 || roots.length === 0) return undefined;
  let current = graph;
  let rootsNow = [...roots];
  let moved = new Map<number, number>(graph.g.map((_node, index) => [index, index]));
  let left = over;
  let dropped = 0;
  let unsure = 1;
  while (left > 0) {
    const found = hiddenMembers(current, rootsNow).sort(
      (a, b) => b.bytes - a.bytes || a.node - b.node || a.at - b.at,
    );
    if (found.length === 0) break;
    let going: HiddenMember[] = [];
    let sure = 0;
    for (const member of found) {
      if (sure >= left) break;
      going.push(member);
      sure += member.bytes;
    }
    if (sure < left) {
      going = found.slice(0, unsure);
      unsure *= 2;
    }
    const before = jsonBytes(current);
    const nodes = current.g.map((node) => (Array.isArray(node) ? [...(node as unknown[])] : node));
    // From the last key of a node back, so that each one's place is still where it was found.
    for (const member of [...going].sort((a, b) => b.node - a.node || b.at - a.at)) {
      (nodes[member.node] as unknown[]).splice(member.at, 2);
    }
    dropped += going.length;
    const reached = graphReachedBy({ ...current, g: nodes }, rootsNow);
    rootsNow = rootsNow.map((root) => reached.moved.get(root) ?? root);
    const composed = new Map<number, number>();
    for (const [from, to] of moved) {
      const now = reached.moved.get(to);
      if (now !== undefined) composed.set(from, now);
    }
    moved = composed;
    current = reached.graph;
    left -= before - jsonBytes(current);
  }
  return dropped === 0 ? undefined : { graph: current, moved, dropped };
}
