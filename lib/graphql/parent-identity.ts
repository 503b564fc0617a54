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
 * plain one, or one with no prototype; never an array, a Map, a Date), or one made a parent
 * already in this replay (`taken`: the same object answered at two places, `primary` and
 * `lines[0]`, was one object at the first call; each place is that node, adversary 108).
 */
export function adoptsNode(node: unknown, taken: boolean): node is object {
  if (typeof node !== 'object' || node === null) return false;
  if (taken) return true;
  if (Array.isArray(node)) return false;
  const prototype = Object.getPrototypeOf(node) as unknown;
  return prototype === null || prototype === Object.prototype;
}

/**
 * `node` made what `built` is: its members (each as defined there) over the node's, and its
 * prototype (see `adoptedPrototype`). The node's members `built` does not have stay as they
 * were, where they were (a field the client did not select, `line.sku`: the node is the first
 * call's object, which another parent's resolver reads whole through its own back-reference,
 * adversary 108); `built`'s others come after them, in its order. `built` is left as it is,
 * and not used after.
 */
export function ontoNode(built: object, node: object): object {
  for (const key of Reflect.ownKeys(built)) {
    Object.defineProperty(node, key, Reflect.getOwnPropertyDescriptor(built, key)!);
  }
  Object.setPrototypeOf(
    node,
    adoptedPrototype(
      Object.getPrototypeOf(node) as object | null,
      Object.getPrototypeOf(built) as object | null,
    ),
  );
  return node;
}

/**
 * The prototype an adopted node is given (`node`'s, `built`'s as they are): `built`'s (the
 * class a replay names, its getters' own prototype), but none where the node has none and
 * `built` is merely plain. The node is the first call's object as the graph keeps it, its
 * absent prototype included (typed-graph.ts); a plain `built` says only that its record did
 * not tell (one stored before `INSTANCE` said so), and `Object.prototype` there would make
 * `row instanceof Object` true on a replay alone (adversary 109).
 */
export function adoptedPrototype(node: object | null, built: object | null): object | null {
  return node === null && built === Object.prototype ? null : built;
}
