import { isDeepStrictEqual } from 'node:util';
import { SuperJSON, type SuperJSONResult } from 'superjson';
import { defineOwn } from './own-member.js';

/**
 * JS values kept with their types, for what a replay hands back to the resolvers under a
 * mutation (a `@ResolveField()` reads its parent) that JSON would change: a `Date` stays a
 * `Date`, a `BigInt` a `BigInt` (JSON refuses it), `undefined` stays there, and so do `Map`,
 * `Set`, `RegExp`, `NaN` and shared references (a cycle too). Written by superjson, as its
 * JSON and the types it read (`{ json, meta }`), which is JSON itself.
 *
 * The library's own instance: classes an app registers on superjson's default one do not
 * change what a stored answer holds.
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
 * A stored `{ json, meta }` of superjson; `keys: 1` where object keys superjson refuses were
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
  kept: KeptData;
  unfaithful: Unfaithful[];
}

/**
 * The members of `data` as typed JSON; never throws (a member with no typed JSON form is left
 * out, and named in `unfaithful`). An instance of a class is kept as its own data (each
 * member typed in turn: an entity's `Date` stays a `Date`) and comes back a plain object, as
 * the object GraphQL resolves from does; what it had more (the methods and getters of its
 * class, a `toJSON()` that JSON would write instead) is not there on a replay, nor is a
 * function; a `Buffer` comes back a `Buffer`, a typed array its typed array. Such members are kept as they can be,
 * and named in `unfaithful`, for the caller to say so.
 */
export function keepData(data: Readonly<Record<string, unknown>>): Kept {
  const plain: Record<string, unknown> = {};
  const lost = new Set<string>();
  /** Members left out: no typed JSON form, even alone. */
  const left = new Set<string>();
  for (const [name, value] of Object.entries(data)) {
    const copying = { lost: false };
    try {
      defineMember(plain, name, plainCopy(value, new Map(), copying));
    } catch {
      // A cycle through a `toJSON()` (JSON.stringify refuses it too).
      left.add(name);
      continue;
    }
    if (copying.lost) lost.add(name);
  }
  let kept: KeptData;
  let back: Record<string, unknown>;
  try {
    kept = write(plain);
    back = restoreData(kept);
  } catch {
    // No typed JSON form for some member (a cycle through a `toJSON()`): each member kept
    // alone where it can be, the others left out and named, never the whole data lost nor
    // the caller's error (a mutation's answer is the resolver's, not the library's).
    const some: Record<string, unknown> = {};
    for (const name of Object.keys(plain)) {
      try {
        restoreData(write({ [name]: plain[name] }));
        defineMember(some, name, plain[name]);
      } catch {
        left.add(name);
      }
    }
    try {
      kept = write(some);
      back = restoreData(kept);
    } catch {
      // Each alone but not together (never seen): none kept, each named.
      for (const name of Object.keys(some)) left.add(name);
      kept = write({});
      back = {};
    }
  }
  const unfaithful = Object.entries(data)
    .filter(
      ([name]) =>
        lost.has(name) ||
        !Object.prototype.hasOwnProperty.call(back, name) ||
        !isDeepStrictEqual(back[name], plain[name]),
    )
    .map(([name, value]) => ({
      name,
      what: left.has(name) ? `${describeValue(value)} with no JSON form` : describeValue(value),
    }));
  return { kept, unfaithful };
}

/**
 * Whether typed JSON gives `value` back exactly (`isDeepStrictEqual`, the classes of its
 * objects included): what a scalar's `serialize()` is given again on a replay must be, as a
 * scalar may tell its values by their class.
 */
export function keepsExactly(value: unknown): boolean {
  try {
    return isDeepStrictEqual(restoreData(write({ value })).value, value);
  } catch {
    // No JSON form (a cycle under an instance of a class): not kept.
    return false;
  }
}

/** Stored typed JSON read back into its values; an empty object when it is not one. */
export function restoreData(kept: unknown): Record<string, unknown> {
  if (typeof kept !== 'object' || kept === null || !('json' in kept)) return {};
  const data = typed.deserialize(kept as KeptData);
  if ((kept as KeptData).keys === 1) unescapeKeys(data, new Set());
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

/** `data` as superjson writes it, as JSON (a BigInt a `toJSON()` gave, as its digits). */
function write(data: Record<string, unknown>): KeptData {
  const escaping = { escaped: false };
  const written = typed.serialize(escapedCopy(data, new Map(), escaping));
  const kept = { json: asJson(written.json) } as KeptData;
  if (written.meta) kept.meta = asJson(written.meta) as KeptData['meta'];
  if (escaping.escaped) kept.keys = 1;
  return kept;
}

/** Defined, not assigned: a member named `__proto__` is data, as in JSON. */
const defineMember = defineOwn;

/**
 * A copy of `value` (made of plain objects, arrays, Maps, Sets and typed values: see
 * `plainCopy`) with its objects' keys as `escapeKey` writes them, shared references and cycles
 * kept; `escaping.escaped` set where one was.
 */
function escapedCopy(
  value: unknown,
  copies: Map<object, unknown>,
  escaping: { escaped: boolean },
): unknown {
  if (typeof value !== 'object' || value === null) return value;
  if (copies.has(value)) return copies.get(value);
  if (value instanceof Map) {
    const copy = new Map<unknown, unknown>();
    copies.set(value, copy);
    for (const [key, item] of value) {
      copy.set(escapedCopy(key, copies, escaping), escapedCopy(item, copies, escaping));
    }
    return copy;
  }
  if (value instanceof Set) {
    const copy = new Set<unknown>();
    copies.set(value, copy);
    for (const item of value) copy.add(escapedCopy(item, copies, escaping));
    return copy;
  }
  if (Array.isArray(value)) {
    const copy: unknown[] = [];
    copies.set(value, copy);
    for (const item of value) copy.push(escapedCopy(item, copies, escaping));
    return copy;
  }
  const prototype = Object.getPrototypeOf(value) as unknown;
  if (prototype !== Object.prototype && prototype !== null) return value;
  const copy: Record<string, unknown> = {};
  copies.set(value, copy);
  for (const [name, item] of Object.entries(value)) {
    const key = escapeKey(name);
    if (key !== name) escaping.escaped = true;
    defineMember(copy, key, escapedCopy(item, copies, escaping));
  }
  return copy;
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
  for (const [name, item] of entries) defineMember(value, unescapeKey(name), item);
}

/** The typed arrays superjson reads back (a `Buffer` by the library's own rule, above). */
const TYPED_ARRAYS: readonly unknown[] = [
  Int8Array,
  Uint8Array,
  Uint8ClampedArray,
  Int16Array,
  Uint16Array,
  Int32Array,
  Uint32Array,
  Float32Array,
  Float64Array,
];

/** Kept by superjson as what they are (a Map's and a Set's members are copied in turn). */
function isTypedValue(value: object): boolean {
  return (
    value instanceof Date ||
    value instanceof RegExp ||
    value instanceof Error ||
    value instanceof URL ||
    Buffer.isBuffer(value) ||
    TYPED_ARRAYS.includes(Object.getPrototypeOf(value)?.constructor)
  );
}

/**
 * `value` with each instance of a class as a plain object of its own data (what superjson
 * walks: it writes an instance it does not know as JSON would, its Dates as strings), shared
 * references and cycles kept. An instance that has more than its own data sets `lost`.
 */
function plainCopy(
  value: unknown,
  copies: Map<object, unknown>,
  copying: { lost: boolean },
): unknown {
  if (typeof value !== 'object' || value === null) return value;
  if (copies.has(value)) return copies.get(value);
  if (isTypedValue(value)) return value;
  if (value instanceof Map) {
    const copy = new Map<unknown, unknown>();
    copies.set(value, copy);
    for (const [key, item] of value) {
      copy.set(plainCopy(key, copies, copying), plainCopy(item, copies, copying));
    }
    return copy;
  }
  if (value instanceof Set) {
    const copy = new Set<unknown>();
    copies.set(value, copy);
    for (const item of value) copy.add(plainCopy(item, copies, copying));
    return copy;
  }
  if (Array.isArray(value)) {
    const copy: unknown[] = [];
    copies.set(value, copy);
    for (const item of value) copy.push(plainCopy(item, copies, copying));
    return copy;
  }
  if (classMembers(value).length > 0) copying.lost = true;
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') {
    // As JSON writes it (a Decimal as its digits, a Luxon DateTime as its string).
    copying.lost = true;
    const json = plainCopy((toJSON as () => unknown).call(value), copies, copying);
    copies.set(value, json);
    return json;
  }
  const copy: Record<string, unknown> = {};
  copies.set(value, copy);
  for (const [name, item] of Object.entries(value)) {
    // Defined, not assigned: a member named `__proto__` is data here, as in JSON.
    defineMember(copy, name, plainCopy(item, copies, copying));
  }
  return copy;
}

/** JSON's own copy of `value`. */
function asJson(value: unknown): unknown {
  const text = JSON.stringify(value, (_key, item: unknown) =>
    typeof item === 'bigint' ? item.toString() : item,
  );
  return text === undefined ? null : (JSON.parse(text) as unknown);
}
