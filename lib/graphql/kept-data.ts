import { SuperJSON, type SuperJSONResult } from 'superjson';
import { defineOwn } from './own-member.js';
import { parentRefIndex } from './parent-graph.js';
import { type Graph, graphWriter, readGraph, writeGraph } from './typed-graph.js';

/**
 * JS values kept with their types, for what a replay hands back to the resolvers under a
 * mutation (a `@ResolveField()` reads its parent) that JSON would change: a `Date` stays a
 * `Date`, a `BigInt` a `BigInt` (JSON refuses it), `undefined` stays there, and so do `Map`,
 * `Set`, `RegExp`, `NaN` and shared references (a cycle too). Written as a graph of typed
 * nodes, without recursion (typed-graph.ts), which is JSON itself. Records stored before it
 * hold superjson's `{ json, meta }`, read by superjson still.
 *
 * The library's own instance: classes an app registers on superjson's default one do not
 * change how a stored record is read.
 */
const typed = new SuperJSON();

/**
 * A Node `Buffer` (pg's and TypeORM's `bytea`, a Prisma 5 `Bytes`) comes back a `Buffer`, as
 * its base64: superjson writes one as a typed array it cannot read back (adversary 93: a
 * `@ResolveField()` calling its parent's `avatar.toString('base64')` answered `[object
 * Object]` on a replay).
 */
typed.registerCustom<Buffer, string>(
  {
    isApplicable: (value): value is Buffer => Buffer.isBuffer(value),
    serialize: (value) => value.toString('base64'),
    deserialize: (value) => Buffer.from(value, 'base64'),
  },
  'Buffer',
);

/**
 * A `{ json, meta }` of superjson, as records stored before the graph hold; `keys: 1` where object keys superjson refuses were
 * written escaped (see `escapeKey`), for `restoreData` to read them back. A record without it
 * (stored before) holds no escaped key: its keys are read as they are.
 */
export type KeptData = SuperJSONResult & { keys?: 1 };

/**
 * The object keys superjson refuses (its prototype-pollution guard, not configurable:
 * "Detected property prototype ..."), each an ordinary name in an app's data (a stage named
 * `prototype`, a role `constructor`, a JSON document's `"__proto__"`). Written with a `~` more
 * before them, and so is a key that is already such a name after `~`s, so that reading back
 * (one `~` less) is exact: `prototype` <-> `~prototype`, `~prototype` <-> `~~prototype`.
 */
const REFUSED_KEY = /^~*(?:__proto__|constructor|prototype)$/;

/** The key as written for superjson (see `REFUSED_KEY`). */
export function escapeKey(key: string): string {
  return REFUSED_KEY.test(key) ? `~${key}` : key;
}

/** The key written by `escapeKey` as it was. */
export function unescapeKey(key: string): string {
  return key.startsWith('~') && REFUSED_KEY.test(key) ? key.slice(1) : key;
}

/** A member of the data that does not come back as it was, and what it was. */
export interface Unfaithful {
  name: string;
  what: string;
}

/** The data kept, and the members it does not give back as they were. */
export interface Kept {
  kept: Graph;
  unfaithful: Unfaithful[];
}

/**
 * The members of `data` as typed JSON (a graph: see typed-graph.ts); never throws (a member
 * that cannot be written is left out, and named in `unfaithful`). An instance of a class is
 * kept as its own data (each member typed in turn: an entity's `Date` stays a `Date`) and
 * comes back a plain object, as the object GraphQL resolves from does; what it had more (the
 * methods and getters of its class, a `toJSON()` that JSON would write instead) is not there
 * on a replay, nor is a function, nor a member under a symbol that is not registered
 * (`Symbol.for`); a `Buffer` comes back a `Buffer`, a typed array its typed array. Such
 * members are kept as they can be, and named in `unfaithful`, for the caller to say so. An
 * object's absent prototype, an array's holes and own members, a Map's or a Set's, and a tree
 * of any depth come back as they were (adversary 103).
 */
export function keepData(data: Readonly<Record<string, unknown>>): Kept {
  const lost = new Set<string | symbol>();
  const left = new Set<string | symbol>();
  const written = writeGraph(data, {
    lost: (key) => lost.add(key),
    left: (key) => left.add(key),
  });
  return { kept: written.graph, unfaithful: unfaithfulOf(data, lost, left) };
}

/** The own data of several objects kept in one graph (see `keepAll`). */
export interface KeptAll {
  kept: Graph;
  /** By object: its node in `kept`. */
  roots: number[];
  /** By object: its members that do not come back as they were (see `keepData`). */
  unfaithful: Unfaithful[][];
  /** Each object written, by its node (see `WrittenGraphs`). */
  nodes: ReadonlyMap<object, number>;
}

/**
 * The own data of each of `all` kept as `keepData` keeps one, all in ONE graph (see
 * parent-graph.ts): what they share (an order every line's data points back at) is written
 * once, so the graph grows with the data. Never throws; a member that cannot be written is
 * left out alone and named. A loss in an object several of them share is named under each
 * one's member that reaches it, as within one object's members (so each parent's type says it).
 */
export function keepAll(
  all: readonly Readonly<Record<string, unknown>>[],
  /** Objects written as another's data (see typed-graph.ts `graphWriter`). */
  writtenAs?: ReadonlyMap<object, object>,
): KeptAll {
  const into = keeper(writtenAs);
  const kept = all.map((data) => into.keep(data));
  return {
    kept: into.graph(),
    roots: kept.map((one) => one.root),
    nodes: into.nodes,
    unfaithful: kept.map((one) => one.unfaithful),
  };
}

/** One object's own data kept into a `Keeper`'s graph: its node, and what is not as it was. */
export interface KeptInto {
  root: number;
  unfaithful: Unfaithful[];
}

/** One graph that objects' own data is kept into as each comes (see `keeper`). */
export interface Keeper {
  /** `data` written now, as `keepAll` writes each of its objects (never throws). */
  keep: (data: Readonly<Record<string, unknown>>) => KeptInto;
  /** The graph as it is now: all the data kept so far. */
  graph: () => Graph;
  /** Each object written, by its node (see `WrittenGraphs`). */
  nodes: ReadonlyMap<object, number>;
}

/**
 * A graph kept into as `keepAll` keeps its objects, but each when it comes, written then: what
 * it holds is kept as it was at that moment, whatever changes it in place afterwards (a
 * resolver's `tags.sort()`: adversary 109). An object already written (reached from an earlier
 * one) is that node, as it was when first written.
 */
export function keeper(writtenAs?: ReadonlyMap<object, object>): Keeper {
  const writer = graphWriter(writtenAs);
  return {
    keep: (data) => {
      const lost = new Set<string | symbol>();
      const left = new Set<string | symbol>();
      const root = writer.root(data, {
        lost: (key) => lost.add(key),
        left: (key) => left.add(key),
      });
      // What is lost is told of the members written: the record's, where it is written as it.
      const written = (writtenAs?.get(data) ?? data) as Readonly<Record<string, unknown>>;
      return { root, unfaithful: unfaithfulOf(written, lost, left) };
    },
    graph: () => writer.done().graph,
    nodes: writer.nodes,
  };
}

/** The members of `data` named `lost` or `left` (see `keepData`), in its order. */
function unfaithfulOf(
  data: Readonly<Record<string, unknown>>,
  lost: ReadonlySet<string | symbol>,
  left: ReadonlySet<string | symbol>,
): Unfaithful[] {
  return Reflect.ownKeys(data)
    .filter((key) => lost.has(key) || left.has(key))
    .map((key) => ({
      name: String(key),
      what: left.has(key)
        ? `${describeValue(data[key as string])} with no JSON form`
        : describeValue(data[key as string]),
    }));
}

/**
 * Whether typed JSON gives `value` back exactly (as `isDeepStrictEqual` tells, the classes of
 * its objects included): what a scalar's `serialize()` is given again on a replay must be, as
 * a scalar may tell its values by their class.
 */
export function keepsExactly(value: unknown): boolean {
  try {
    return writeGraph(value).exact;
  } catch {
    // No JSON form (a cycle through a `toJSON()`): not kept.
    return false;
  }
}

/**
 * Stored typed JSON read back into its values: a node of the answer's shared graph (`{ p }`,
 * read by `shared`: see `keepAll`), a graph of its own (typed-graph.ts, stored before the
 * shared one), or superjson's `{ json, meta }` of a record stored before that; an empty object
 * when it is none of them.
 */
export function restoreData(
  kept: unknown,
  shared?: (index: number, unnamed?: (className: string) => void) => unknown,
  unnamed?: (className: string) => void,
): Record<string, unknown> {
  if (typeof kept !== 'object' || kept === null) return {};
  let data: unknown;
  const index = parentRefIndex(kept);
  if (index !== undefined) data = shared?.(index, unnamed);
  else if ('g' in kept && Array.isArray(kept.g)) data = readGraph(kept as Graph);
  else if ('json' in kept) {
    data = typed.deserialize(kept as KeptData);
    if ((kept as KeptData).keys === 1) unescapeKeys(data, new Set());
  }
  return typeof data === 'object' && data !== null ? (data as Record<string, unknown>) : {};
}

/**
 * The methods and getters of the value's class (and of its parents) but those named in
 * `except`: an object made of its own data has none of them.
 */
export function classMembers(value: object, except: Readonly<Record<string, unknown>> = {}) {
  const members = new Set<string>();
  let prototype = Object.getPrototypeOf(value) as object | null;
  while (prototype && prototype !== Object.prototype) {
    for (const name of Object.getOwnPropertyNames(prototype)) {
      if (name !== 'constructor' && !(name in except)) members.add(name);
    }
    prototype = Object.getPrototypeOf(prototype) as object | null;
  }
  return [...members];
}

/** What a value is, for a message: its kind, never its content (which may be private). */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'function') return 'a function';
  if (typeof value !== 'object') return `a ${typeof value}`;
  if (value instanceof Promise) return 'a Promise';
  if (typeof (value as { pipe?: unknown }).pipe === 'function') return 'a stream';
  const prototype = Object.getPrototypeOf(value) as unknown;
  if (prototype === null || prototype === Object.prototype) return 'an object';
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name ? `an instance of ${name}` : 'an object with a prototype';
}

/**
 * `value` as superjson read it, its objects' keys written by `escapeKey` put back as they were
 * (in place, in their order: a resolver's `Object.entries()` reads them so), each object once.
 */
function unescapeKeys(value: unknown, seen: Set<object>): void {
  if (typeof value !== 'object' || value === null || seen.has(value)) return;
  seen.add(value);
  if (value instanceof Map) {
    for (const [key, item] of value) {
      unescapeKeys(key, seen);
      unescapeKeys(item, seen);
    }
    return;
  }
  if (value instanceof Set || Array.isArray(value)) {
    for (const item of value as Iterable<unknown>) unescapeKeys(item, seen);
    return;
  }
  const prototype = Object.getPrototypeOf(value) as unknown;
  if (prototype !== Object.prototype && prototype !== null) return;
  const entries = Object.entries(value);
  for (const [, item] of entries) unescapeKeys(item, seen);
  if (!entries.some(([name]) => unescapeKey(name) !== name)) return;
  for (const [name] of entries) delete (value as Record<string, unknown>)[name];
  for (const [name, item] of entries) defineOwn(value, unescapeKey(name), item);
}
