/**
 * Each alias's own read of a getter field at one place (adversary 112). GraphQL resolves a
 * field once per response key: `lines { a: url b: url }` reads `url` twice at each line, and a
 * getter that signs afresh per read answers `a` and `b` two signatures. The library reads such
 * a field as GraphQL would, once per response key, each at its key's turn among the object's
 * other keys (as the executor reads them: read-order.ts, adversary 114), stores each
 * alias's read where it is another than the place's first, and answers each alias its own at
 * the first call and on a replay (placed-reads.ts, wire-value.ts `ALIASED`).
 */

/** A field node's name and alias, as a `FieldNode` has them. */
export interface KeyedNode {
  readonly alias?: { readonly value: string };
  readonly name: { readonly value: string };
}

/**
 * The response keys that select a field, in the order graphql-js resolves them: each once, at
 * its first appearance in the (fragment-expanded) selection.
 */
export function responseKeys(nodes: readonly KeyedNode[]): string[] {
  return [...new Set(nodes.map((node) => node.alias?.value ?? node.name.value))];
}

/**
 * Whether the library reads a field once per response key at a place, rather than once for
 * all of them: only a getter (data reads the same at every key) of a leaf type (a scalar, an
 * enum, a list of them: a getter's fresh object would need each alias's own sub-selection
 * walked and stored apart, which the library does not do: its aliases share the first read),
 * selected under two keys or more, at a field with a resolver of its own (`wrapped`: the
 * library answers each alias through its wrapper of it; a field with none is read by the
 * executor's field resolver, which reads the one object the library answers, so each alias
 * gets the first read whatever else was read: field-wrappers.ts).
 */
export function readsPerAlias(field: {
  readonly getter: boolean;
  readonly leaf: boolean;
  readonly keys: number;
  readonly wrapped: boolean;
}): boolean {
  return field.getter && field.leaf && field.keys > 1 && field.wrapped;
}

/** One response key's read of a field: its answer's wire form, or its failure. */
export type AliasRead = { readonly wire: unknown } | { readonly failed: true };

/**
 * The response keys after the first whose read is another answer than the first key's (the
 * place's read, which every other key answers): each answers its own. A failure is always its
 * own (its error, at its own path); a read that writes the same wire form as the first is not
 * (the answer is its wire form), so a getter that gives a fresh but equal list costs nothing.
 */
export function aliasesApart<T extends { readonly key: string; readonly read: AliasRead }>(
  first: AliasRead,
  later: readonly T[],
): T[] {
  return later.filter(({ read }) => {
    if ('failed' in read || 'failed' in first) return true;
    return JSON.stringify(read.wire) !== JSON.stringify(first.wire);
  });
}
