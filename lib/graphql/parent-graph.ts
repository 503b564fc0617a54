import { type Graph, renamedRefs } from './typed-graph.js';

/**
 * The own data of one stored answer's parents (`__parent`, wire-value.ts) is written into ONE
 * typed graph, stored once beside the answer (`parentGraph`, field-answer.ts): each parent's
 * `__parent` names its node in it (`{ p: index }`). An object several parents reach (an ORM's
 * back-reference: every `line.order` is the one order, with all its lines) is one node of it,
 * written once and read once per replay, as it was one object at the first call; one graph per
 * parent wrote it again for each, and the stored answer grew with the square of the lines
 * (adversary 105). Records stored before hold each parent's graph (or superjson's form) under
 * its `__parent`, read as they were.
 *
 * What this file decides is how the graph shrinks when parents' data must be left out for
 * `maxResponseBytes` (parent-data-within.ts): a node is freed only when no parent still kept
 * reaches it.
 */

/**
 * A parent's `__parent` in a record that holds a `parentGraph`: its node's index there, and
 * (`s`) the node of the parent's own object where the graph holds it too (reached back through
 * its own data: `line.order.lines[i]` is the line), which a replay makes the parent itself.
 */
export interface ParentRef {
  p: number;
  s?: number;
}

/** The `__parent` naming node `index` of the answer's `parentGraph` (and its own, `source`). */
export function parentRef(index: number, source?: number): ParentRef {
  return source === undefined ? { p: index } : { p: index, s: source };
}

/**
 * `ref` once the graph keeps only the nodes `moved` maps (old index to new, graphReachedBy):
 * its node where it is now (none where it went), and its own object's node (`s`) only where
 * what is kept still reaches it. A parent's own object is never a root of its own: kept for
 * itself, no data a replay reads reaches it, and it held the whole row the answer holds
 * already (adversary 108: forty lines' rows pushed their own small data out).
 */
export function movedRef(
  moved: ReadonlyMap<number, number>,
  ref: ParentRef,
): ParentRef | undefined {
  const node = moved.get(ref.p);
  if (node === undefined) return undefined;
  return parentRef(node, ref.s === undefined ? undefined : moved.get(ref.s));
}

/** The node of the parent's own object a stored `__parent` names (`s`), if any. */
export function parentRefSource(stored: unknown): number | undefined {
  if (parentRefIndex(stored) === undefined) return undefined;
  const { s } = stored as { s?: unknown };
  return typeof s === 'number' && Number.isInteger(s) && s >= 0 ? s : undefined;
}

/** The node a stored `__parent` names, or undefined where it holds its own data (before). */
export function parentRefIndex(stored: unknown): number | undefined {
  if (typeof stored !== 'object' || stored === null || Array.isArray(stored)) return undefined;
  const { p } = stored as { p?: unknown };
  return typeof p === 'number' && Number.isInteger(p) && p >= 0 ? p : undefined;
}

/** The nodes `node` names (`['@', i]`), by index. */
function refsOf(node: unknown): number[] {
  const found: number[] = [];
  renamedRefs(node, (index) => {
    found.push(index);
    return index;
  });
  return found;
}

/** A node's bytes in the stored answer: its JSON and the comma after it. */
function nodeBytes(node: unknown): number {
  return Buffer.byteLength(JSON.stringify(node) ?? 'null') + 1;
}

/**
 * By root (a node of `graph`), the bytes of the nodes only it reaches: what leaving it out
 * frees at least, whichever others go with it. A node two roots reach is neither's (freed
 * only when both go). Linear: each node is marked at most twice (one root's, then shared).
 */
export function ownBytes(graph: Graph, roots: readonly number[]): Map<number, number> {
  const nodes = graph.g;
  /** By node: -1 reached by none yet, a root's index, or -2 reached by more than one. */
  const mark = new Array<number>(nodes.length).fill(-1);
  for (const root of roots) {
    if (root < 0 || root >= nodes.length) continue;
    const stack: [number, number][] = [[root, mark[root] === -1 ? root : -2]];
    if (mark[root] === -1) mark[root] = root;
    else mark[root] = -2;
    while (stack.length > 0) {
      const [at, carried] = stack.pop()!;
      for (const next of refsOf(nodes[at])) {
        if (next < 0 || next >= nodes.length) continue;
        const was = mark[next];
        const now = was === -1 || was === carried ? carried : -2;
        if (now === was) continue;
        mark[next] = now;
        stack.push([next, now]);
      }
    }
  }
  const bytes = new Map<number, number>(roots.map((root) => [root, 0]));
  mark.forEach((owner, index) => {
    if (owner >= 0) bytes.set(owner, (bytes.get(owner) ?? 0) + nodeBytes(nodes[index]));
  });
  return bytes;
}

/**
 * By node, the first of `roots` (in their order) that reaches it, or -1: whose a node several
 * parents share is (the log names a loss in it under that parent's type). Each node once.
 */
export function firstRoots(graph: Graph, roots: readonly number[]): number[] {
  const nodes = graph.g;
  const first = new Array<number>(nodes.length).fill(-1);
  for (const root of roots) {
    if (root < 0 || root >= nodes.length || first[root] !== -1) continue;
    first[root] = root;
    const stack = [root];
    while (stack.length > 0) {
      const at = stack.pop()!;
      for (const next of refsOf(nodes[at])) {
        if (next < 0 || next >= nodes.length || first[next] !== -1) continue;
        first[next] = root;
        stack.push(next);
      }
    }
  }
  return first;
}

/** The graph with only what `roots` reach, and where each root's node is in it now. */
export interface KeptGraph {
  graph: Graph;
  /** Old index to new, for each node kept. */
  moved: Map<number, number>;
}

/**
 * `graph` with only the nodes `roots` reach (each kept in its order, renumbered): the nodes
 * no kept parent reaches are freed, never one that a kept parent still reaches.
 */
export function graphReachedBy(graph: Graph, roots: readonly number[]): KeptGraph {
  const nodes = graph.g;
  const reached = new Array<boolean>(nodes.length).fill(false);
  const stack = roots.filter((root) => root >= 0 && root < nodes.length);
  for (const root of stack) reached[root] = true;
  while (stack.length > 0) {
    const at = stack.pop()!;
    for (const next of refsOf(nodes[at])) {
      if (next < 0 || next >= nodes.length || reached[next]) continue;
      reached[next] = true;
      stack.push(next);
    }
  }
  const moved = new Map<number, number>();
  reached.forEach((kept, index) => {
    if (kept) moved.set(index, moved.size);
  });
  const kept = nodes
    .filter((_node, index) => reached[index])
    .map((node) => renamedRefs(node, (index) => moved.get(index) ?? index));
  // The classes of its nodes (node-classes.ts), of those kept, by their new index.
  const classes = (graph as { c?: unknown }).c;
  if (typeof classes !== 'object' || classes === null) return { graph: { g: kept }, moved };
  const c: Record<string, unknown> = {};
  for (const [index, named] of Object.entries(classes)) {
    const to = moved.get(Number(index));
    if (to !== undefined) c[String(to)] = named;
  }
  const named: Graph = Object.keys(c).length > 0 ? Object.assign({ g: kept }, { c }) : { g: kept };
  return { graph: named, moved };
}
