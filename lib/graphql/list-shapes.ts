import { isListCollection, LIST_HOLES, listMembers, withListMembers } from './list-members.js';

/**
 * A selected list field's value is given to the app's resolvers as a list the library builds
 * in two places: at the first call, of its items' views (an item with a getter field is its
 * Proxy: wire-value.ts `walkValue`); on a replay, of the items rebuilt from the answer
 * (`fromWire`). Each was an Array of the items only, so a `@ResolveField()` read another
 * collection than the app's: a Set's `size` undefined, a page's own `total` gone at the first
 * call, a hole that `reduce` skips given as `undefined` at the first call and `null` on a
 * replay (adversary 115: `data: null` for committed mutations). What this file holds is the
 * one record of what the app's collection is besides its items (its kind, its holes, its own
 * members: its SHAPE) and the one way both places build the list from it, so that the first
 * call's resolvers and a replay's read the same collection.
 *
 * The record is itself a collection of the app's kind, empty: an array, a `Set`, a `Map`, a
 * typed array, holding the app's own members that are no items (list-members.ts) and, for an
 * array with holes, their indexes under `LIST_HOLES`. It is kept in the parent's data beside
 * the answer (`__parent`, under the field's property), written by the graph of the parents'
 * data (typed-graph.ts), which writes each of those kinds, its own members and registered
 * symbols; a record stored before it (`listMembers`' array) reads as a dense array's.
 */

/** The typed arrays a record is made of (a subclass is built as its built-in: no app code). */
const TYPED_ARRAYS = [
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
] as const;

type TypedArrayKind = (typeof TYPED_ARRAYS)[number];

function typedArrayKind(value: object): TypedArrayKind | undefined {
  return TYPED_ARRAYS.find((kind) => value instanceof kind);
}

/** The indexes below `list.length` that hold no item (`lines[2] = line`: 0 and 1 did not). */
export function holesOf(list: readonly unknown[]): number[] {
  const holes: number[] = [];
  for (let index = 0; index < list.length; index += 1) {
    if (!Object.prototype.hasOwnProperty.call(list, index)) holes.push(index);
  }
  return holes;
}

/**
 * The record of `value`'s shape (see above), or undefined where the items alone make it again
 * (a dense array with no own members, and anything no collection: a generator, read once, is
 * given as the array that was read). A Set, a Map, a typed array always has one: its kind.
 */
export function listShape(value: unknown): object | undefined {
  if (!isListCollection(value)) return undefined;
  const members = listMembers(value);
  if (Array.isArray(value)) {
    const holes = holesOf(value);
    if (holes.length === 0) return members;
    const shape = members ?? [];
    Object.defineProperty(shape, LIST_HOLES, {
      value: holes,
      enumerable: true,
      writable: true,
      configurable: true,
    });
    return shape;
  }
  const kind = value instanceof Set || value instanceof Map ? undefined : typedArrayKind(value);
  const shape: object =
    value instanceof Set ? new Set() : value instanceof Map ? new Map() : new kind!(0);
  withListMembers(shape, members);
  return shape;
}

/** The holes a record names, each an index below `length` (anything else is no record's). */
function recordedHoles(shape: object, length: number): ReadonlySet<number> {
  const holes = (shape as { [LIST_HOLES]?: unknown })[LIST_HOLES];
  if (!Array.isArray(holes)) return new Set();
  return new Set(
    holes.filter(
      (index): index is number => Number.isInteger(index) && index >= 0 && index < length,
    ),
  );
}

/**
 * The collection of `items` (the list's items as the library gives them: views, or rebuilt
 * from the answer, one for each index) that `shape` (`listShape`'s record, or read back) says
 * the app's was: its kind, its holes (a hole's item, `undefined` or the answer's `null`, is
 * left out), its own members. `items` itself where no record says otherwise (a dense array's
 * members are defined onto it); a Map only of entries, else the items as they are.
 */
export function shapedList(items: unknown, shape: unknown): unknown {
  if (!Array.isArray(items) || !isListCollection(shape)) return items;
  const made = collectionOf(items, shape);
  withListMembers(made, shape);
  return made;
}

function collectionOf(items: unknown[], shape: object): unknown {
  if (shape instanceof Set) return new Set(items);
  if (shape instanceof Map) {
    return items.every((item) => Array.isArray(item))
      ? new Map(items as [unknown, unknown][])
      : items;
  }
  if (!Array.isArray(shape)) {
    const kind = typedArrayKind(shape);
    try {
      return kind ? (kind.from as (of: unknown[]) => unknown)(items) : items;
    } catch {
      // An item no typed array holds (a BigInt in a Float64Array): the items as they are.
      return items;
    }
  }
  const holes = recordedHoles(shape, items.length);
  if (holes.size === 0) return items;
  const made: unknown[] = new Array(items.length);
  items.forEach((item, index) => {
    if (!holes.has(index)) made[index] = item;
  });
  return made;
}
