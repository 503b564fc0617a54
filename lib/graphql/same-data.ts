import { isDeepStrictEqual } from 'node:util';
import { writeGraph } from './typed-graph.js';

/**
 * Whether `a` and `b` are the same data, as `isDeepStrictEqual` tells. Node's walk recurses,
 * and a tree some 2,000 levels deep (a JSON scalar's document) overflows its stack (adversary
 * 103: the `RangeError` stored as the mutation's answer); such a pair is told by their typed
 * graphs (typed-graph.ts, written without recursion), equal only where each is plain data
 * the graph gives back exactly and the two are written alike (keys in the same order).
 */
export function sameData(a: unknown, b: unknown): boolean {
  try {
    return isDeepStrictEqual(a, b);
  } catch (error) {
    // By its name: thrown in Node's own realm, it need not be this realm's `RangeError`.
    if ((error as { name?: unknown } | null)?.name !== 'RangeError') throw error;
    const first = writeGraph(a);
    const second = writeGraph(b);
    return (
      first.exact && second.exact && JSON.stringify(first.graph) === JSON.stringify(second.graph)
    );
  }
}
