import { hiddenKey, keptMember, readMemberKey } from './hidden-members.js';

/**
 * JS values as JSON with their types, written and read without recursion: the data a replay
 * hands back to the app's resolvers (kept-data.ts). Every object is a node of a flat list and
 * is named by its index, so that a tree of any depth (a 3,000-deep comment thread: adversary
 * 103, which superjson's recursive walk, and the library's, took for "no JSON form"), a shared
 * reference and a cycle are written alike, by a loop over a queue. A node says what JSON
 * cannot: an object's absent prototype (graphql-js' input objects, a RegExp match's
 * `groups`), an array's holes and own members that are no items (a match's `index`, `input`),
 * a Map's or a Set's own members, a member under a registered symbol (`Symbol.for`), each
 * own key in its order (as a list: PostgreSQL's `jsonb` sorts an object's keys).
 *
 * A value (a `Cell`) is itself where JSON writes it back as it is (a string, a boolean, null,
 * a finite number but -0), else a tagged array: `['u']` undefined, `['#', 'NaN']` (and
 * `Infinity`, `-Infinity`, `-0`), `['n', digits]` a BigInt, `['y', key]` a registered symbol,
 * `['@', i]` the object of node `i`.
 */
export type Cell = string | number | boolean | null | readonly unknown[];

/** The form's stored shape: `g`, the nodes; node 0 is the value written. */
export interface Graph {
  g: unknown[];
}

/** How the value differs from what `readGraph` gives back. */
export interface Written {
  graph: Graph;
  /** Something is not given back as it was (named by `losses`' kinds). */
  lost: boolean;
  /** Given back but not as `isDeepStrictEqual` tells it: an object of a class is plain. */
  exact: boolean;
}

/** The typed arrays read back as what they are. */
const TYPED_ARRAYS: Readonly<Record<string, new (bytes: ArrayBufferLike) => ArrayBufferView>> = {
  Int8Array,
  Uint8Array,
  Uint8ClampedArray,
  Int16Array,
  Uint16Array,
  Int32Array,
  Uint32Array,
  Float32Array,
  Float64Array,
  BigInt64Array,
  BigUint64Array,
};

/** The standard errors, made again of their own class (a filter may tell them apart). */
const ERRORS: Readonly<Record<string, ErrorConstructor>> = {
  Error,
  TypeError,
  RangeError,
  SyntaxError,
  ReferenceError,
  EvalError,
  URIError,
  AggregateError: AggregateError as unknown as ErrorConstructor,
};

/**
 * An error's own members its constructor defines not enumerable (`cause` from its options,
 * an `AggregateError`'s `errors`), which a resolver reads as any other (adversary 104).
 */
const ERROR_MEMBERS = ['cause', 'errors'] as const;

/** Whether `key` is one of an array's indexes (its items, never its own members). */
function isIndex(key: string, length: number): boolean {
  if (!/^(?:0|[1-9]\d*)$/.test(key)) return false;
  return Number(key) < length;
}

/** A member JSON leaves out of an object: a function, a symbol no other process knows. */
function isLeftOut(item: unknown): boolean {
  return typeof item === 'function' || (typeof item === 'symbol' && !Symbol.keyFor(item));
}

/**
 * Objects `toJSON()`s may give in one write (all of an answer's parents together): more than 1
 * MB of stored data holds (the default `maxResponseBytes`), at some 20 bytes each, and over
 * ten times the chain `JSON.stringify` itself writes (some 4,000 deep). Past it, a `toJSON()`
 * that makes a new object of a new class each call, without end (never a cycle by
 * `isJsonCycle`: no target repeats), is stopped, in some 0.2 s.
 */
const MAX_JSON_OBJECTS = 50_000;

/**
 * Steps `isJsonCycle` may walk in one write, all its calls together (some 20 ms): where a
 * target called again (a price shared by many rows) is deep in chains of `toJSON()`s, each
 * call walks the chain above it.
 */
const MAX_JSON_WALK = 10_000_000;

/**
 * Where each node of a graph being written came from, for `isJsonCycle`: by index, the target
 * whose `toJSON()` gave its object (none for another object), the nearest node at or above it
 * (by the place it was first reached from) that a `toJSON()` gave (-1 for none), and, for
 * such a node, the nearest one above the place it was given at.
 */
export interface JsonLinks {
  madeBy: (object | undefined)[];
  nearest: number[];
  up: number[];
  /**
   * By node, what earlier walks learned there: whether a target's object is at or above it.
   * The links of a node never change once it is written, so a walk stops at the first node
   * that knows, and a target called at every step of a long chain (value objects each
   * revision of a history holds: adversary 108) walks a step or two, not the chain. A node
   * taken back (a member left out) loses its memo with it: its index is the next node's.
   */
  known?: (Map<object, boolean> | undefined)[];
}

/**
 * Whether calling `target`'s `toJSON()` at a place in node `at` goes round: an object a
 * `toJSON()` of `target` gave holds that place (`toJSON() { return { again: this } }`: each
 * call a new object holding `target` again, without end; JSON.stringify overflows its stack),
 * and the steps walked up to tell. Objects of other targets one inside another, however many
 * (a revision history of 1,001 value objects, each `toJSON()` giving the one before: adversary
 * 107, once taken for a cycle at 1,000), never are, nor a `toJSON()` called at any number of
 * places side by side (one price shared by 1,001 rows, adversary 104), nor one giving an
 * object already written (`return this`, adversary 105).
 */
export function isJsonCycle(
  target: object,
  at: number,
  links: JsonLinks,
): { cycle: boolean; steps: number } {
  let steps = 0;
  let cycle = false;
  const walked: number[] = [];
  for (let node = links.nearest[at] ?? -1; node !== -1; node = links.up[node] ?? -1) {
    steps += 1;
    const known = links.known?.[node]?.get(target);
    if (known !== undefined) {
      cycle = known;
      break;
    }
    walked.push(node);
    if (links.madeBy[node] === target) {
      cycle = true;
      break;
    }
  }
  if (links.known) {
    for (const node of walked) (links.known[node] ??= new Map()).set(target, cycle);
  }
  return { cycle, steps };
}

/** An object whose prototype is `Object.prototype` or none. */
function isPlainObject(value: object): boolean {
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === null || prototype === Object.prototype;
}

/**
 * An object's own enumerable keys in their order, a registered symbol's as `['y', key]`; and,
 * where `hidden` (an object's own data, whatever its enumerability: hidden-members.ts), its
 * own data that is not enumerable, each key in `hiddenKey`'s form (adversary 111).
 */
function ownKeys(
  value: object,
  skip: (key: string) => boolean,
  losing: (key: symbol) => void,
  hidden = false,
) {
  const keys: { key: string | symbol; written: unknown }[] = [];
  for (const key of Reflect.ownKeys(value)) {
    const descriptor = Reflect.getOwnPropertyDescriptor(value, key);
    const kept = descriptor ? keptMember(descriptor, hidden) : 'none';
    if (kept === 'none') continue;
    const as = (written: unknown) =>
      kept === 'hidden' ? hiddenKey(written, descriptor!.writable === true) : written;
    if (typeof key === 'string') {
      if (!skip(key)) keys.push({ key, written: as(key) });
      continue;
    }
    const name = Symbol.keyFor(key);
    // An unregistered symbol is another in the process that reads it back: left out, said
    // where enumerable; a hidden one is a library's mark on its object (an ORM's), no data.
    if (name === undefined && kept === 'hidden') continue;
    if (name === undefined) losing(key);
    else keys.push({ key, written: as(['y', name]) });
  }
  return keys;
}

/** What `writeGraph` tells of each of the root's own members (see `Written`). */
export interface MemberNotes {
  /** It holds something not given back as it was. */
  lost(key: string | symbol): void;
  /** It could not be written (a cycle through `toJSON()`, a getter that throws): left out. */
  left(key: string | symbol): void;
}

/**
 * Writes `value` as a graph, without recursion (a loop over a queue of objects). An instance
 * of a class is written as its own data (a `toJSON()` as what it gives, as JSON writes it), a
 * function and an unregistered symbol are left out: each is a loss. Where the value is an
 * object, its own members are written one after another, each with all it holds first (so
 * `notes` is told the member a loss is under: a node two members share, each of them); one
 * that cannot be written is left out alone.
 */
export function writeGraph(value: unknown, notes?: MemberNotes): Written {
  const writer = graphWriter();
  writer.root(value, notes);
  return writer.done();
}

/** Several values written into one graph, and the node each is (see `writeGraphs`). */
export interface WrittenGraphs {
  graph: Graph;
  /** By value: the index of its node in `graph`. */
  roots: number[];
  /**
   * The node an object reached while writing is (by identity), if it is one: where a root's
   * own object is also inside what they share (`line.order.lines[i]`), or where objects of a
   * class are named by node (node-classes.ts).
   */
  nodes: ReadonlyMap<object, number>;
}

/**
 * Writes each of `values` (objects) into ONE graph, as `writeGraph` writes one: an object two
 * of them reach (an ORM's back-reference, `line.order === order`, from every line's data) is
 * one node, written once, so the graph grows with the data, not with the values times what
 * they share (adversary 105: one graph each wrote the whole order again per line). `notes(i)`
 * is told of the `i`th value's members, as `writeGraph`'s: a loss in a node several values
 * share is told to each of them (adversary 107: said for the first value's type only).
 */
export function writeGraphs(
  values: readonly object[],
  notes?: (index: number) => MemberNotes | undefined,
): WrittenGraphs {
  const writer = graphWriter();
  const roots = values.map((value, index) => writer.root(value, notes?.(index)));
  return { graph: writer.done().graph, roots, nodes: writer.nodes };
}

/**
 * The writer `writeGraph` and `writeGraphs` share: each `root()` written into the same nodes,
 * by the same index of objects (so a shared object is one node), its own members one by one.
 * Each `root()` is written when it is called, as its objects are then: a graph written into
 * as values come (kept-data.ts `keeper`) holds each as it was when it came.
 */
export function graphWriter(
  /**
   * Objects written as the data of another (by object: what its node holds): a parent's own
   * object whose record of its data is all the node needs (record-in-node.ts), so that the
   * object is one node wherever the graph reaches it, and its data is written once.
   */
  writtenAs?: ReadonlyMap<object, object>,
) {
  const contentOf = (of: object): object => writtenAs?.get(of) ?? of;
  const nodes: unknown[] = [];
  const indexes = new Map<object, number>();
  const links: JsonLinks = { madeBy: [], nearest: [], up: [], known: [] };
  /** The targets whose `toJSON()` gave a new object, their count, and `isJsonCycle`'s steps. */
  const makers = new Set<object>();
  let made = 0;
  let walked = 0;
  /** The node being written, whose cells `cell()` writes. */
  let at = 0;
  // Walked by `head`, never by `shift()`, which moves every entry left: quadratic over a
  // wide parent's thousands of rows (adversary 104).
  const queue: { value: object; index: number }[] = [];
  let head = 0;
  let exact = true;
  let lost = false;
  let member: string | symbol | undefined;
  /** The first node the member being written wrote: those below were written before it. */
  let memberStart = -1;
  /** Told of the root being written's members (see `MemberNotes`). */
  let notes: MemberNotes | undefined;
  /** By node: something written in it is lost (see `reachesLoss`). */
  const lossAt: boolean[] = [];
  const reaches: boolean[] = [];
  const losing = () => {
    lost = true;
    exact = false;
    lossAt[at] = true;
    if (member !== undefined) notes?.lost(member);
  };
  /**
   * A node written before the member being written, that it reaches again: what is lost in
   * it (or in what it holds) was told to the member that wrote it, and is told to this one
   * too (adversary 107: a customer every line and refund shares, lost for `Line` only).
   */
  const reachedAgain = (index: number) => {
    if (member === undefined || !notes || index >= memberStart) return;
    if (reachesLoss(index, nodes, lossAt, reaches)) notes.lost(member);
  };
  /** A new node, its links as reached from node `at` (`madeBy`: see `JsonLinks`). */
  const newNode = (of: object, madeBy?: object): number => {
    const index = nodes.length;
    nodes.push(null);
    indexes.set(of, index);
    links.madeBy[index] = madeBy;
    links.nearest[index] = madeBy ? index : (links.nearest[at] ?? -1);
    links.up[index] = madeBy ? (links.nearest[at] ?? -1) : -1;
    return index;
  };
  const cell = (item: unknown): Cell => {
    switch (typeof item) {
      case 'string':
      case 'boolean':
        return item;
      case 'number':
        if (Number.isNaN(item)) return ['#', 'NaN'];
        if (item === Infinity) return ['#', 'Infinity'];
        if (item === -Infinity) return ['#', '-Infinity'];
        if (Object.is(item, -0)) return ['#', '-0'];
        return item;
      case 'bigint':
        return ['n', item.toString()];
      case 'undefined':
        return ['u'];
      case 'symbol': {
        const name = Symbol.keyFor(item);
        if (name !== undefined) return ['y', name];
        losing();
        return ['u'];
      }
      case 'function':
        losing();
        return ['u'];
    }
    if (item === null) return null;
    let target = item as object;
    /** The target whose `toJSON()` gave `target`, where it is new. */
    let madeBy: object | undefined;
    // As JSON writes it (a Decimal as its digits, a Luxon DateTime as its string): a loss.
    // Called once at each place, as JSON does (`SerializeJSONProperty`): never on what it
    // gives, which is written as it is (its own `toJSON`, copied by `{ ...this }`, is a
    // function and left out; `return this` is the object's own data): adversary 105, where
    // calling it again on a spread copy made a new object each time, without end.
    if (hasOwnToJson(target)) {
      losing();
      const json = (target as { toJSON: () => unknown }).toJSON();
      if (typeof json !== 'object' || json === null) return cell(json);
      // A new object each time that holds `target` again is a cycle, JSON's own refusal;
      // one already written (`return this`, a shared value) leads nowhere new.
      if (!indexes.has(json)) {
        // A target never called before is on no chain: only one called again is walked for.
        if (makers.has(target)) {
          const walk = isJsonCycle(target, at, links);
          if (walk.cycle) throw new Error('a cycle through toJSON()');
          walked += walk.steps;
          if (walked > MAX_JSON_WALK) throw new Error('toJSON() chains too long to walk');
        }
        made += 1;
        if (made > MAX_JSON_OBJECTS) throw new Error('more objects given by toJSON() than kept');
        makers.add(target);
        madeBy = target;
      }
      target = json;
    }
    let index = indexes.get(target);
    if (index === undefined) {
      index = newNode(target, madeBy);
      queue.push({ value: target, index });
    } else reachedAgain(index);
    return ['@', index];
  };
  const members = (of: object, skip: (key: string) => boolean = () => false, hidden = false) => {
    const flat: unknown[] = [];
    for (const { key, written } of ownKeys(of, skip, losing, hidden)) {
      const item = (of as Record<string | symbol, unknown>)[key];
      // Left out of an object, as JSON leaves it out (an array's place keeps `undefined`).
      if (isLeftOut(item)) losing();
      else flat.push(written, cell(item));
    }
    return flat;
  };
  const drain = () => {
    while (head < queue.length) {
      const next = queue[head];
      head += 1;
      at = next.index;
      const written = node(contentOf(next.value));
      // With no prototype as the object is (a driver's dictionary-style row written as its
      // record: record-in-node.ts), whatever its record's is.
      if (written[0] === 'o' && Object.getPrototypeOf(next.value) === null) written[0] = 'O';
      nodes[next.index] = written;
    }
    queue.length = 0;
    head = 0;
  };
  /** Writes `value` as a node of its own (or finds the one it is), its index. */
  const root = (value: unknown, told?: MemberNotes): number => {
    notes = told;
    member = undefined;
    if (typeof value === 'object' && value !== null) {
      const known = indexes.get(value);
      if (known !== undefined) return known;
    }
    const index = nodes.length;
    nodes.push(null);
    links.madeBy[index] = undefined;
    links.nearest[index] = -1;
    links.up[index] = -1;
    at = index;
    if (typeof value !== 'object' || value === null) {
      nodes[index] = ['=', cell(value)];
      return index;
    }
    indexes.set(value, index);
    if (!isPlainObject(contentOf(value))) {
      queue.push({ value, index });
      drain();
      return index;
    }
    const content = contentOf(value);
    const flat: unknown[] = [];
    const losingKey = (key: symbol) => {
      member = key;
      losing();
    };
    for (const { key, written } of ownKeys(content, () => false, losingKey, true)) {
      member = key;
      at = index;
      const before = nodes.length;
      memberStart = before;
      try {
        const item = (content as Record<string | symbol, unknown>)[key];
        if (isLeftOut(item)) {
          losing();
          continue;
        }
        const cellOf = cell(item);
        drain();
        flat.push(written, cellOf);
      } catch {
        // Left out alone: what it began to write is taken back (never a node another root
        // or member wrote before it, all of which are below `before`).
        queue.length = 0;
        head = 0;
        nodes.length = before;
        // Every list kept by node, `isJsonCycle`'s memo too: the next member's nodes take
        // these indexes again, and a memo left there answered for another object (adversary
        // 109: "target above node i" kept from a `toJSON()` cycle left out a member after it).
        for (const list of [links.madeBy, links.nearest, links.up, links.known, lossAt, reaches]) {
          if (list && list.length > before) list.length = before;
        }
        for (const [object, at] of indexes) if (at >= before) indexes.delete(object);
        notes?.left(key);
      }
    }
    member = undefined;
    memberStart = -1;
    // With no prototype as the object is (a driver's dictionary-style row written as its
    // record: record-in-node.ts), whatever its record's is.
    nodes[index] = [Object.getPrototypeOf(value) === null ? 'O' : 'o', ...flat];
    return index;
  };
  const done = (): Written => ({ graph: { g: nodes }, lost, exact });
  /** Each object written, by its node (never a `toJSON()`'s target: what it gave is one). */
  const written: ReadonlyMap<object, number> = indexes;
  function node(of: object): unknown[] {
    // An app's subclass of the built-in (`class BusinessDay extends Date { get isoDay() }`)
    // comes back the bare built-in: never exact, and its class's members a loss, said as for
    // any other class (adversary 105: said of no member, and a Date subclass called exact).
    const base = builtInPrototype(of);
    if (base !== undefined) {
      const below = classBelow(of, base);
      if (below !== 'none') exact = false;
      if (below === 'members') losing();
    }
    if (Array.isArray(of)) {
      const items: Cell[] = [];
      for (let i = 0; i < of.length; i += 1) {
        items.push(Object.prototype.hasOwnProperty.call(of, i) ? cell(of[i]) : ['h']);
      }
      // Its own members that are no items, whatever their enumerability (a page's `total`
      // defined out of JSON on the page itself: adversary 112), as an object's; never its
      // `length`, which its node holds.
      const noItem = (key: string) => key === 'length' || isIndex(key, of.length);
      return ['a', of.length, items, ...members(of, noItem, true)];
    }
    if (of instanceof Map) {
      const entries: Cell[] = [];
      for (const [key, item] of of) entries.push(cell(key), cell(item));
      return ['m', entries, ...members(of, () => false, true)];
    }
    if (of instanceof Set) {
      const items: Cell[] = [];
      for (const item of of) items.push(cell(item));
      return ['s', items, ...members(of, () => false, true)];
    }
    if (of instanceof Date) {
      // Its own members are not written: said, not dropped silently.
      if (Reflect.ownKeys(of).length > 0) losing();
      const time = of.getTime();
      return ['d', Number.isNaN(time) ? null : time];
    }
    if (of instanceof RegExp) return ['r', of.source, of.flags, of.lastIndex];
    if (of instanceof URL) return ['l', of.href];
    if (Buffer.isBuffer(of)) return ['b', of.toString('base64')];
    const typedName = typedArrayName(of);
    if (typedName) {
      const view = of as ArrayBufferView;
      const length = (view as unknown as { length: number }).length;
      if (Reflect.ownKeys(view).some((key) => typeof key !== 'string' || !isIndex(key, length))) {
        losing();
      }
      const bytes = Buffer.from(view.buffer, view.byteOffset, view.byteLength);
      return ['t', typedName, bytes.toString('base64')];
    }
    if (of instanceof Error) {
      if (!(of.name in ERRORS) || Object.getPrototypeOf(of) !== ERRORS[of.name].prototype) {
        exact = false;
      }
      // `E` (`e`, stored before, has no such members): each of `ERROR_MEMBERS`, `['h']` where
      // it is not its own, then its enumerable members.
      const hidden = ERROR_MEMBERS.map((key) =>
        Object.prototype.hasOwnProperty.call(of, key) &&
        !Object.prototype.propertyIsEnumerable.call(of, key)
          ? cell((of as unknown as Record<string, unknown>)[key])
          : ['h'],
      );
      return ['E', of.name, of.message, ...hidden, ...members(of)];
    }
    const prototype = Object.getPrototypeOf(of) as unknown;
    if (prototype !== null && prototype !== Object.prototype) {
      // Its own data, as the object GraphQL resolves from: its class is not there.
      exact = false;
      if (hasClassMembers(of)) losing();
    }
    // Its own data whatever its enumerability (hidden-members.ts).
    return [prototype === null ? 'O' : 'o', ...members(of, () => false, true)];
  }
  return { root, done, nodes: written };
}

/**
 * Whether node `from` of the written `nodes`, or a node it reaches, holds a loss (`lossAt`):
 * walked without recursion, each node once, its answer kept in `reaches` (for every node a
 * walk found no loss under, and for those on the way to one), so that a node many members
 * reach (an order every line's data points back at) is walked once.
 */
export function reachesLoss(
  from: number,
  nodes: readonly unknown[],
  lossAt: readonly boolean[],
  reaches: boolean[],
): boolean {
  if (reaches[from] !== undefined) return reaches[from];
  const cameFrom = new Map<number, number>([[from, -1]]);
  const pending = [from];
  while (pending.length > 0) {
    const next = pending.pop() as number;
    if (lossAt[next] || reaches[next]) {
      for (let on = next; on !== -1; on = cameFrom.get(on) ?? -1) reaches[on] = true;
      return true;
    }
    renamedRefs(nodes[next], (child) => {
      if (!cameFrom.has(child) && reaches[child] !== false) {
        cameFrom.set(child, next);
        pending.push(child);
      }
      return child;
    });
  }
  for (const node of cameFrom.keys()) reaches[node] = false;
  return false;
}

/** The stored graph read back: node 0's value (objects made first, filled in after). */
export function readGraph(graph: Graph): unknown {
  const made = readGraphNodes(graph);
  const first = graph.g[0];
  if (Array.isArray(first) && first[0] === '=') return readCell(first[1], made);
  return made[0];
}

/** A cell's value, its objects' from `made` (the graph's, by node). */
function readCell(item: unknown, made: readonly unknown[]): unknown {
  if (!Array.isArray(item)) return item;
  switch (item[0]) {
    case 'u':
      return undefined;
    case '#':
      return item[1] === '-0' ? -0 : Number(item[1]);
    case 'n':
      return BigInt(item[1] as string);
    case 'y':
      return Symbol.for(item[1] as string);
    case '@':
      return made[item[1] as number];
    default:
      return undefined;
  }
}

/**
 * Every node of the stored graph read back, by index (a graph of several roots, `writeGraphs`,
 * is read once, each root's value its node's object, the objects they share one each).
 */
export function readGraphNodes(graph: Graph): unknown[] {
  const nodes = graph.g;
  const made: unknown[] = nodes.map(shell);
  const value = (item: unknown): unknown => readCell(item, made);
  const key = (written: unknown): string | symbol =>
    Array.isArray(written) ? Symbol.for(written[1] as string) : String(written);
  const fill = (target: object, flat: readonly unknown[]) => {
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const { written, enumerable, writable } = readMemberKey(flat[i]);
      // Defined, not assigned: a member named `__proto__` is data; a hidden one not
      // enumerable again (hidden-members.ts).
      Object.defineProperty(target, key(written), {
        value: value(flat[i + 1]),
        enumerable,
        writable,
        configurable: true,
      });
    }
  };
  nodes.forEach((node, index) => {
    const target = made[index];
    if (!Array.isArray(node) || typeof target !== 'object' || target === null) return;
    const [tag, ...rest] = node as unknown[];
    if (tag === 'o' || tag === 'O' || tag === 'e') fill(target, tag === 'e' ? rest.slice(2) : rest);
    else if (tag === 'E') {
      ERROR_MEMBERS.forEach((name, i) => {
        const item = rest[2 + i];
        if (Array.isArray(item) && item[0] === 'h') return;
        // Not enumerable, as its constructor defines it.
        Object.defineProperty(target, name, {
          value: value(item),
          enumerable: false,
          writable: true,
          configurable: true,
        });
      });
      fill(target, rest.slice(2 + ERROR_MEMBERS.length));
    } else if (tag === 'a') {
      const items = rest[1] as unknown[];
      items.forEach((item, i) => {
        if (!(Array.isArray(item) && item[0] === 'h')) (target as unknown[])[i] = value(item);
      });
      fill(target, rest.slice(2));
    } else if (tag === 'm') {
      const entries = rest[0] as unknown[];
      for (let i = 0; i + 1 < entries.length; i += 2) {
        (target as Map<unknown, unknown>).set(value(entries[i]), value(entries[i + 1]));
      }
      fill(target, rest.slice(1));
    } else if (tag === 's') {
      for (const item of rest[0] as unknown[]) (target as Set<unknown>).add(value(item));
      fill(target, rest.slice(1));
    }
  });
  return made;
}

/**
 * Where a node's own members begin (key and cell pairs to its end), by its kind; undefined
 * for a node that holds none (a Date, a Buffer, `=`). What `renamedRefs` walks as pairs, and
 * where hidden-within.ts finds the hidden members it may leave out.
 */
export function membersStart(node: unknown): number | undefined {
  if (!Array.isArray(node)) return undefined;
  switch (node[0]) {
    case 'o':
    case 'O':
      return 1;
    case 'e':
    case 'a':
      return 3;
    case 'E':
      return 3 + ERROR_MEMBERS.length;
    case 'm':
    case 's':
      return 2;
    default:
      return undefined;
  }
}

/**
 * The node `node` with each object it names (`['@', i]`) named by `rename(i)`: by its kind,
 * where its cells are (an item list of strings `['@', 1]` is no reference). `rename` is also
 * how a walk finds the nodes a node reaches (parent-graph.ts).
 */
export function renamedRefs(node: unknown, rename: (index: number) => number): unknown {
  if (!Array.isArray(node)) return node;
  const ref = (item: unknown): unknown =>
    Array.isArray(item) && item[0] === '@' && typeof item[1] === 'number'
      ? ['@', rename(item[1])]
      : item;
  /** Key and value pairs from `from` on: each value a cell. */
  const pairs = (flat: readonly unknown[], from: number) =>
    flat.map((item, i) => (i >= from && (i - from) % 2 === 1 ? ref(item) : item));
  const cells = (list: unknown) => (Array.isArray(list) ? list.map(ref) : list);
  switch (node[0]) {
    case '=':
      return ['=', ref(node[1])];
    case 'o':
    case 'O':
      return pairs(node, 1);
    case 'e':
      return pairs(node, 3);
    case 'E': {
      const members = pairs(node, 3 + ERROR_MEMBERS.length);
      return members.map((item, i) => (i >= 3 && i < 3 + ERROR_MEMBERS.length ? ref(item) : item));
    }
    case 'a': {
      const members = pairs(node, 3);
      members[2] = cells(node[2]);
      return members;
    }
    case 'm':
    case 's': {
      const members = pairs(node, 2);
      members[1] = cells(node[1]);
      return members;
    }
    default:
      return node;
  }
}

/** A node's object, empty (filled by `readGraph`), or its value where it holds no other. */
function shell(node: unknown): unknown {
  if (!Array.isArray(node)) return undefined;
  switch (node[0]) {
    case 'o':
      return {};
    case 'O':
      return Object.create(null) as object;
    case 'a':
      return new Array<unknown>(node[1] as number);
    case 'm':
      return new Map();
    case 's':
      return new Set();
    case 'd':
      return new Date(node[1] === null ? NaN : (node[1] as number));
    case 'r': {
      const regexp = new RegExp(node[1] as string, node[2] as string);
      regexp.lastIndex = node[3] as number;
      return regexp;
    }
    case 'l':
      return new URL(node[1] as string);
    case 'b':
      return Buffer.from(node[1] as string, 'base64');
    case 't': {
      const bytes = Buffer.from(node[2] as string, 'base64');
      const copy = new Uint8Array(bytes).buffer;
      const Typed = TYPED_ARRAYS[node[1] as string] ?? Uint8Array;
      return new Typed(copy);
    }
    case 'e':
    case 'E': {
      const made =
        node[1] === 'AggregateError'
          ? new AggregateError([], node[2] as string)
          : new (ERRORS[node[1] as string] ?? Error)(node[2] as string);
      // Its own only where its class's is another (an app's `NotFound` made an `Error`).
      if (made.name !== node[1]) made.name = node[1] as string;
      return made;
    }
    default:
      return undefined;
  }
}

function typedArrayName(value: object): string | undefined {
  if (!ArrayBuffer.isView(value) || value instanceof DataView) return undefined;
  const name = (Object.getPrototypeOf(value) as { constructor?: { name?: string } } | null)
    ?.constructor?.name;
  return name && name in TYPED_ARRAYS ? name : undefined;
}

/** A `toJSON()` JSON would write it by; never a Date's, nor a Buffer's (each typed here). */
function hasOwnToJson(value: object): boolean {
  if (value instanceof Date || Buffer.isBuffer(value) || value instanceof URL) return false;
  return typeof (value as { toJSON?: unknown }).toJSON === 'function';
}

/**
 * The prototype of the built-in `value` is written as (its node's kind), or `undefined` for an
 * object written as its own data. An error's is the nearest standard one's (`ERRORS`).
 */
export function builtInPrototype(value: object): object | undefined {
  if (Array.isArray(value)) return Array.prototype;
  if (value instanceof Map) return Map.prototype;
  if (value instanceof Set) return Set.prototype;
  if (value instanceof Date) return Date.prototype;
  if (value instanceof RegExp) return RegExp.prototype;
  if (value instanceof URL) return URL.prototype;
  if (Buffer.isBuffer(value)) return Buffer.prototype;
  const typedName = typedArrayName(value);
  if (typedName) return TYPED_ARRAYS[typedName].prototype;
  if (!(value instanceof Error)) return undefined;
  const standard = new Set<object>(Object.values(ERRORS).map((made) => made.prototype as object));
  let prototype = Object.getPrototypeOf(value) as object | null;
  while (prototype && !standard.has(prototype)) {
    prototype = Object.getPrototypeOf(prototype) as object | null;
  }
  return prototype ?? Error.prototype;
}

/**
 * What the classes between `value` and the built-in prototype `base` add: `'none'` where
 * there are none (it is the built-in itself), `'plain'` where they add no method nor getter
 * (a copy of its data is all it was, but not of its class), `'members'` where they do (lost
 * on a copy). A prototype of another realm's built-in (its constructor native code, as a
 * Jest sandbox's `Array`) stops the walk as `base` does: it is no app's class.
 */
export function classBelow(value: object, base: object): 'none' | 'plain' | 'members' {
  let below: 'none' | 'plain' | 'members' = 'none';
  for (
    let prototype = Object.getPrototypeOf(value) as object | null;
    prototype && prototype !== base && !isNativePrototype(prototype);
    prototype = Object.getPrototypeOf(prototype) as object | null
  ) {
    if (Object.getOwnPropertyNames(prototype).some((name) => name !== 'constructor')) {
      return 'members';
    }
    below = 'plain';
  }
  return below;
}

/** A prototype whose constructor is the engine's own (`Array`, another realm's `Date`). */
export function isNativePrototype(prototype: object): boolean {
  if (!Object.prototype.hasOwnProperty.call(prototype, 'constructor')) return false;
  const made = (prototype as { constructor: unknown }).constructor;
  return (
    typeof made === 'function' &&
    /\{\s*\[native code\]\s*\}\s*$/.test(Function.prototype.toString.call(made))
  );
}

/** The methods and getters of its class (and of its parents): a plain copy has none. */
function hasClassMembers(value: object): boolean {
  for (
    let prototype = Object.getPrototypeOf(value) as object | null;
    prototype && prototype !== Object.prototype;
    prototype = Object.getPrototypeOf(prototype) as object | null
  ) {
    if (Object.getOwnPropertyNames(prototype).some((name) => name !== 'constructor')) return true;
  }
  return false;
}
