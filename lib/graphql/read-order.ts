import { type KeyedNode } from './alias-reads.js';

/**
 * The order in which the library reads an object's selected fields (adversary 114): graphql-js
 * executes an object's fields by response key, each at its first appearance in the collected
 * selection (`collectFields`: fragments inlined, `@include`/`@skip` read), and completes each
 * one's value depth-first before the next key. A getter that signs with a counting nonce
 * (`primary { a: url thumbUrl b: url }`) answers each key by that order, so the library reads
 * in it too: a field at its first key, and again at a later key only where it reads once per
 * alias (`readsPerAlias`, alias-reads.ts), at that key's own place, never right after the first.
 */

/** One read of a field: its name, the response key it is read under, and whether it is its first. */
export interface OrderedRead {
  readonly name: string;
  readonly key: string;
  readonly first: boolean;
}

/**
 * The reads of an object's fields, in graphql-js's order: `nodes` the collected field nodes in
 * selection order, `perAlias(name)` whether that field is read again under each later key.
 */
export function readOrder(
  nodes: readonly KeyedNode[],
  perAlias: (name: string) => boolean,
): OrderedRead[] {
  const keys = new Set<string>();
  const names = new Set<string>();
  const reads: OrderedRead[] = [];
  for (const node of nodes) {
    const key = node.alias?.value ?? node.name.value;
    if (keys.has(key)) continue;
    keys.add(key);
    const name = node.name.value;
    const first = !names.has(name);
    names.add(name);
    if (first || perAlias(name)) reads.push({ name, key, first });
  }
  return reads;
}
