/**
 * A replay's parent made the very object its own data reaches back to (adversary 107): at the
 * first call `line.order.lines[i]` IS the line a `@ResolveField()` is given (an ORM loads both
 * sides of a relation so), and code finds a line among its order's lines by identity
 * (`indexOf`, `filter(l => l !== line)`). The shared graph holds that line as a node (its
 * `__parent` names it: `s`, parent-graph.ts); a replay builds the parent as ever, then moves
 * what it built onto that node, so the graph's references to it are the parent.
 */

/**
 * Whether the read node `node` can be made a replay's parent: an object of its own data (a
 * plain one, or one with no prototype; never an array, a Map, a Date), not made another
 * parent already in this replay (the same object answered at two places: the first keeps it).
 */
export function adoptsNode(node: unknown, taken: boolean): node is object {
  if (taken || typeof node !== 'object' || node === null || Array.isArray(node)) return false;
  const prototype = Object.getPrototypeOf(node) as unknown;
  return prototype === null || prototype === Object.prototype;
}

/**
 * `node` made what `built` is: its own members (each as defined there, in its order) and its
 * prototype, none of its own before. `built` is left as it is, and not used after.
 */
export function ontoNode(built: object, node: object): object {
  for (const key of Reflect.ownKeys(node)) Reflect.deleteProperty(node, key);
  for (const key of Reflect.ownKeys(built)) {
    Object.defineProperty(node, key, Reflect.getOwnPropertyDescriptor(built, key)!);
  }
  Object.setPrototypeOf(node, Object.getPrototypeOf(built) as object | null);
  return node;
}
