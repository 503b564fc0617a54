import { type Keeper, keeper, restoreData, type Unfaithful } from './kept-data.js';
import { namedReader, type SharedRead } from './node-classes.js';
import { defineOwn } from './own-member.js';
import { graphReachedBy, movedRef, parentRef } from './parent-graph.js';
import { type ParentEntry, parentEntry } from './parent-entry.js';
import { type ReplayLoss } from './replay-loss.js';
import { recordOnce } from './same-record.js';
import { hasNoPrototype } from './bare-objects.js';
import { notedAbsentFields } from './absent-fields.js';
import { type Graph, renamedRefs } from './typed-graph.js';

/**
 * The parent of a field the app resolves (a `@ResolveField()`), inside a middleware field's
 * output: a replay rebuilds that output from the first answer (middleware-outputs.ts), which
 * holds only the selected fields, as GraphQL wrote them; the resolver runs again on a replay
 * and reads its parent's own data (an entity's column no client selects: `countryCode`), so
 * that data is kept at the first answer, as the mutation's own value keeps it (wire-value.ts),
 * and given back to the rebuilt parent (adversary 81).
 *
 * All the parents of one answer's outputs are written into ONE typed graph, stored once beside
 * the outputs (`outputsGraph`), each parent's entry naming its node (`{ p: index }`), as the
 * mutation value's own parents are (parent-graph.ts): an object several parents reach (an
 * ORM's back-reference, each `line.order` the one order with all its lines) is written once.
 * A graph per parent wrote the order again for every line: the stored answer grew with the
 * square of the lines, past `maxResponseBytes` at a few hundred (adversary 107). Records
 * stored before hold each parent's own graph (or superjson's form) under its key, read so.
 *
 * Each parent is written into that graph when it is noted, before its first resolver runs,
 * never at the answer: a resolver that changes its parent's data in place (`l.tags.sort()`)
 * would have the sorted tags kept, and a replay's resolvers read other data than the first
 * call's (adversary 109). An object several parents reach is written once, as it was when the
 * first of them was noted; a replay's resolvers change it again, in the same order.
 */

/**
 * A parent's own data as noted while GraphQL runs (see `notedParent`): its node in the graph
 * of its answer's parents (`into`), written then, its type, and what of it is not as it was;
 * its own object (`source`, whose node a replay makes the parent where the graph holds it),
 * the fields of its type it did not have (`absent`), and whether it had no prototype (`bare`).
 */
export interface NotedParent {
  node: number;
  type: string;
  unfaithful: Unfaithful[];
  into: Keeper;
  source?: object;
  absent?: string[];
  bare?: boolean;
}

/**
 * What the parents of one answer are noted into, by the record they are noted in: the one
 * graph, and each object's records (same-record.ts: one object at several places, a product a
 * DataLoader gives five times, is one record, written once, each place naming its node).
 */
interface Noting {
  into: Keeper;
  records: WeakMap<object, Record<string, unknown>[]>;
  noted: Map<object, NotedParent>;
}

const notings = new WeakMap<object, Noting>();

/**
 * The parent's own data, written when its field's resolver is about to run (see the file's
 * comment) into the one graph of the parents noted in `answer` (its answer's record of them,
 * output-paths.ts): its own enumerable data properties, never a getter, a method or a Promise
 * (nothing is called or loaded: a lazy relation is a getter, its loaded value a Promise).
 * Undefined where it has none. Never throws (a member with no typed JSON form is left out).
 */
export function notedParent(
  source: object,
  type: string,
  answer: object,
  absent: readonly string[] = [],
): NotedParent | undefined {
  const data: Record<string, unknown> = {};
  for (const name of Object.keys(source)) {
    const own = Object.getOwnPropertyDescriptor(source, name);
    if (!own || !('value' in own)) continue;
    const item: unknown = own.value;
    if (typeof item === 'function' || isThenable(item)) continue;
    defineOwn(data, name, item);
  }
  if (Object.keys(data).length === 0) return undefined;
  let noting = notings.get(answer);
  if (!noting) {
    noting = { into: keeper(), records: new WeakMap(), noted: new Map() };
    notings.set(answer, noting);
  }
  // The same place's marks as the value's (wire-value.ts): its absent fields where its
  // resolvers read its data (they do: it is noted for them), its absent prototype.
  const marks = {
    source,
    ...(notedAbsentFields(absent, true) ? { absent: [...absent] } : {}),
    ...(hasNoPrototype(source) ? { bare: true } : {}),
  };
  // One object at several places holding the same data is one record, one node (adversary
  // 110: written once per place, five places of a 50 kB product were over maxResponseBytes).
  const record = recordOnce(noting.records, source, data);
  const earlier = noting.noted.get(record);
  if (earlier) return { ...earlier, ...marks, type };
  const { root, unfaithful } = noting.into.keep(record);
  const parent: NotedParent = { node: root, type, unfaithful, into: noting.into, ...marks };
  noting.noted.set(record, parent);
  return parent;
}

/** The parents as stored: each a node of `graph`, and what they do not give back as it was. */
export interface KeptParents {
  /** By key, the node of each parent's data (none where nothing was noted). */
  parents: Record<string, ParentEntry>;
  /** Their data, one typed graph (none where no parent is kept). */
  graph?: Graph;
  /** What a kept parent does not give back as it was (a `Decimal`'s methods), for the log. */
  losses: ReplayLoss[];
}

/**
 * The noted parents (by key; a value that is no `NotedParent` is left out) as stored: one
 * typed graph of what they reach (the graph they were noted into, less the parents left out
 * since, whose output the answer does not hold), each entry naming its node in it. Parents
 * noted into several graphs (of several answers) have theirs one after another. Never
 * throws; what typed JSON does not give back as it was is named in `losses`.
 */
export function keptParents(noted: Readonly<Record<string, unknown>>): KeptParents {
  const entries = Object.entries(noted).filter((entry): entry is [string, NotedParent] =>
    isNotedParent(entry[1]),
  );
  if (entries.length === 0) return { parents: {}, losses: [] };
  const { nodes, roots, sources } = joinedGraphs(entries.map(([, parent]) => parent));
  const { graph, moved } = graphReachedBy({ g: nodes }, roots);
  const parents: Record<string, ParentEntry> = {};
  const losses: ReplayLoss[] = [];
  entries.forEach(([key, { type, unfaithful, absent, bare }], index) => {
    // Its own object's node where what is kept reaches it (`line.order.lines[i]`): a replay
    // makes the parent that very object, as the value's `__parent` does (adversary 110).
    const ref = movedRef(moved, parentRef(roots[index], sources[index])) ?? parentRef(roots[index]);
    parents[key] = parentEntry(ref, absent, bare);
    losses.push(...parentLosses(type, unfaithful));
  });
  return { parents, graph, losses };
}

/**
 * The nodes of the graphs `noted` were written into, each graph once, one after another (the
 * refs of each after the first moved by where it starts), and each parent's node there.
 */
export function joinedGraphs(noted: readonly NotedParent[]): {
  nodes: unknown[];
  roots: number[];
  /** Each parent's own object's node, where its graph holds it (see `NotedParent.source`). */
  sources: (number | undefined)[];
} {
  const starts = new Map<Keeper, number>();
  const nodes: unknown[] = [];
  for (const { into } of noted) {
    if (starts.has(into)) continue;
    const start = nodes.length;
    starts.set(into, start);
    // One by one: a spread of a graph of many thousand nodes is past the stack's arguments.
    for (const node of into.graph().g) {
      nodes.push(start === 0 ? node : renamedRefs(node, (index) => index + start));
    }
  }
  return {
    nodes,
    roots: noted.map(({ into, node }) => (starts.get(into) ?? 0) + node),
    sources: noted.map(({ into, source }) => {
      const own = source === undefined ? undefined : into.nodes.get(source);
      return own === undefined ? undefined : (starts.get(into) ?? 0) + own;
    }),
  };
}

function isNotedParent(value: unknown): value is NotedParent {
  if (typeof value !== 'object' || value === null) return false;
  const { node, type, unfaithful, into } = value as Partial<NotedParent>;
  return (
    typeof node === 'number' &&
    typeof type === 'string' &&
    Array.isArray(unfaithful) &&
    typeof into?.graph === 'function' &&
    node >= 0 &&
    node < into.graph().g.length
  );
}

/** The stored outputs' graph read once per replay (by its decoded object: see `parentData`). */
const readers = new WeakMap<object, SharedRead>();

/**
 * The reader of a stored answer's `outputsGraph`, one per decoded record: every parent of one
 * replay gets its data from the same objects, shared as they were. None without a graph.
 */
export function parentsReader(graph: unknown): SharedRead | undefined {
  if (typeof graph !== 'object' || graph === null) return undefined;
  let read = readers.get(graph);
  if (!read) readers.set(graph, (read = namedReader(graph)));
  return read;
}

/**
 * The kept data back as the rebuilt parent's own: a node of the outputs' graph (`{ p }`, read
 * by `read`), or a graph of its own (a record stored before); empty without it.
 */
export function parentData(kept: unknown, read?: SharedRead): Record<string, unknown> {
  return kept === undefined ? {} : restoreData(kept, read);
}

function isThenable(value: unknown): boolean {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as PromiseLike<unknown>).then === 'function'
  );
}

/**
 * What a kept parent of the object type `type` does not give back as it was (`unfaithful`),
 * as the mutation's own value says it (wire-value.ts): for `warnLosses` (replay-loss.ts).
 */
export function parentLosses(type: string, unfaithful: readonly Unfaithful[]): ReplayLoss[] {
  if (unfaithful.length === 0) return [];
  const what = unfaithful.map((member) => `${member.name} (${member.what})`);
  return [{ type, what: `its data ${what.join(', ')} does not come back as it was` }];
}
