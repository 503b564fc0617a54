/**
 * The node of the answer's shared graph a replay makes each parent's object (its `__parent`'s
 * `s`, parent-graph.ts). At the first call one object answered at several places (a cart
 * holding the one product three times, as a DataLoader gives its one cached entity for each
 * repeated id) is one object at each, handed to every place's `@ResolveField()`; a resolver
 * may tell its places apart by identity (a request's `WeakSet` of the products rendered, to
 * mark repeats). Where the graph holds the object itself (its own data reaches back to it:
 * `line.order.lines[i]`), that node is it (adversary 107). Where it does not, a replay built a
 * new object per place, and `repeated` answered false, false, false where the first call
 * answered false, true, true (adversary 111): the node of the object's first record (its data
 * for the resolvers, one record for all places that hold the same: same-record.ts) is made
 * that one object at each of its places.
 */

/** One parent's record noted at one place of the answer (its `__parent` or `__kept`). */
export interface NotedPlace {
  /** The object the resolver answered there. */
  source: object;
  /** Its place: one per place, whatever records it holds (`__parent` and `__kept` alike). */
  at: object;
  /** The node its record is in the shared graph. */
  root: number;
}

/**
 * By noted place, the node a replay makes its object, or undefined (a new object, as ever):
 * the graph's node of the object itself (`graphNode`), else, where the object is at more than
 * one place, the node of its first record, the same for each of its places; an object at one
 * place only is left as it was (nothing to be one with).
 */
export function objectNodes(
  noted: readonly NotedPlace[],
  graphNode: (source: object) => number | undefined,
): (number | undefined)[] {
  const places = new Map<object, Set<object>>();
  const first = new Map<object, number>();
  for (const { source, at, root } of noted) {
    let held = places.get(source);
    if (!held) places.set(source, (held = new Set()));
    held.add(at);
    if (!first.has(source)) first.set(source, root);
  }
  return noted.map(
    ({ source }) =>
      graphNode(source) ?? (places.get(source)!.size > 1 ? first.get(source) : undefined),
  );
}
