import { transformedClassNamed, transformedClassOf } from './class-transforms.js';
import { keepData, restoreData } from './kept-data.js';
import { plainNaming } from './nest-fields.js';
import { defineOwn } from './own-member.js';

/**
 * Where, in a value stored as data (a JSON scalar's, a getter's), objects of classes
 * class-transformer knows are, by path: a serializer outside `@Idempotent()` goes into arrays
 * and objects and transforms each (an `@Exclude()`d token of a `Device` in a list), so a replay
 * names each such class again where it was (adversary 51a). `c`: the class's name at this
 * place; `k`: the places under it that hold some, by key (an array's by index).
 */
export interface ClassTree {
  c?: string;
  /** What the class's getters gave there (`classGetters`), as typed JSON (`keepData`). */
  g?: unknown;
  k?: Record<string, ClassTree>;
}

/** Deep enough for data; a cycle or a deeper place is left unnamed. */
const MAX_DEPTH = 32;

/**
 * The class tree of `value`, if any place in it holds an object of a class class-transformer
 * knows; `twins` gets the names that more than one such class has (a replay cannot tell them).
 */
export function classTreeOf(
  value: unknown,
  twins: Set<string>,
  seen = new Set<object>(),
  depth = 0,
): ClassTree | undefined {
  if (typeof value !== 'object' || value === null || seen.has(value) || depth > MAX_DEPTH) {
    return undefined;
  }
  seen.add(value);
  const tree: ClassTree = {};
  if (!Array.isArray(value)) {
    const known = transformedClassOf(value);
    if (known) {
      tree.c = known.name;
      if (transformedClassNamed(known.name) !== known) twins.add(known.name);
      // A transform of the class may read its getters (`obj.hidePhone`): read now, given to
      // the replay as data that is not enumerable, as a getter is not (adversary 52a).
      const gotten = classGetters(value, {});
      if (Object.keys(gotten).length > 0) tree.g = keepData(gotten).kept;
    }
  }
  for (const [key, item] of Object.entries(value)) {
    const under = classTreeOf(item, twins, seen, depth + 1);
    if (under) defineOwn((tree.k ??= {}), key, under);
  }
  seen.delete(value);
  return tree.c !== undefined || tree.k !== undefined ? tree : undefined;
}

/**
 * Whether any of `values` reaches (as `classTreeOf` walks: each object's own enumerable
 * members) an object of a class class-transformer knows: where none does, none has a class
 * tree, and the walk of each (its path its own, so an order every line points back at is
 * walked again from each line: adversary 105) is not needed. Each object once, without
 * recursion: linear in the data, whatever they share.
 */
export function reachesKnownClass(values: readonly unknown[]): boolean {
  const seen = new Set<object>();
  const stack = values.filter((value): value is object => typeof value === 'object' && !!value);
  while (stack.length > 0) {
    const value = stack.pop()!;
    if (seen.has(value)) continue;
    seen.add(value);
    if (!Array.isArray(value) && transformedClassOf(value)) return true;
    for (const item of Object.values(value)) {
      if (typeof item === 'object' && item !== null && !seen.has(item)) stack.push(item as object);
    }
  }
  return false;
}

/**
 * `value` (plain data, as stored) with each place of `tree` named by its class again: a plain
 * object whose `constructor` (not enumerable) is that class, holding the same data. Throws
 * where the class is not one class class-transformer knows in this process: replayed without
 * it, its transforms would not apply (a masked value shown). With `unnamed` (data a replay
 * may do without: `__parent`, adversary 96), such a place is left plain and `unnamed` told
 * its class's name instead: never the answer, only what the app's resolvers read.
 */
export function namedByTree(
  value: unknown,
  tree: unknown,
  unnamed?: (className: string) => void,
): unknown {
  if (typeof tree !== 'object' || tree === null) return value;
  if (typeof value !== 'object' || value === null) return value;
  const { c, k } = tree as ClassTree;
  if (k) {
    const holder = value as Record<string, unknown>;
    for (const [key, under] of Object.entries(k)) {
      if (hasOwn(holder, key)) defineOwn(holder, key, namedByTree(holder[key], under, unnamed));
    }
  }
  if (typeof c !== 'string' || Array.isArray(value)) return value;
  const { g } = tree as ClassTree;
  const target = transformedClassNamed(c);
  if (!target && unnamed) {
    unnamed(c);
    return value;
  }
  if (!target) {
    throw new Error(
      `the stored answer held an instance of ${c}, which class-transformer does not know as ` +
        'one class in this process: replayed without it, its transforms would not apply',
    );
  }
  // Defined, not assigned: its own `__proto__` (a JSON document's) stays an own key.
  const named = plainNaming(target) as Record<string, unknown>;
  for (const [name, item] of Object.entries(value as object)) defineOwn(named, name, item);
  for (const [name, item] of Object.entries(restoreData(g))) {
    if (hasOwn(named, name)) continue;
    Object.defineProperty(named, name, {
      value: item,
      enumerable: false,
      writable: true,
      configurable: true,
    });
  }
  return named;
}

/**
 * What the getters of `source`'s class chain give that are no field of its type and no data
 * of its own, an accessor pair's too (`get isPrivate()` over a bit-flag column). Not a TypeORM
 * lazy relation's accessor, which loads when read (known from TypeORM's own metadata); a
 * getter that throws, or gives a Promise or a function, is left out.
 */
export function classGetters(source: object, fields: Readonly<Record<string, unknown>>) {
  const gotten: Record<string, unknown> = {};
  for (
    let proto = Object.getPrototypeOf(source) as object | null;
    proto && proto !== Object.prototype;
    proto = Object.getPrototypeOf(proto) as object | null
  ) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      if (name in gotten || name in fields || hasOwn(source, name)) continue;
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      if (!descriptor?.get) continue;
      if (descriptor.set && isLazyRelation(proto, name)) continue;
      try {
        const item = (source as Record<string, unknown>)[name];
        if (typeof item === 'function') continue;
        if (isThenable(item)) {
          Promise.resolve(item).catch(() => undefined);
          continue;
        }
        defineOwn(gotten, name, item);
      } catch {
        // Not kept: a serializer reading it would have thrown at the first answer too.
      }
    }
  }
  return gotten;
}

/** TypeORM's relation metadata, as its global storage holds it (TypeORM is optional here). */
interface LazyRelations {
  relations?: { target?: unknown; propertyName?: string; isLazy?: boolean }[];
}

/**
 * Whether `name` on the class whose prototype is `proto` is a TypeORM lazy relation: its
 * accessor, which TypeORM defines on the entity's prototype, loads the relation when read.
 */
function isLazyRelation(proto: object, name: string): boolean {
  const storage = (globalThis as { typeormMetadataArgsStorage?: LazyRelations })
    .typeormMetadataArgsStorage;
  const owner = (proto as { constructor?: unknown }).constructor;
  return (storage?.relations ?? []).some(
    (relation) =>
      relation.isLazy === true &&
      relation.propertyName === name &&
      typeof relation.target === 'function' &&
      (relation.target === owner ||
        Object.prototype.isPrototypeOf.call(relation.target.prototype as object, proto)),
  );
}

function hasOwn(value: object, name: string): boolean {
  return Object.prototype.hasOwnProperty.call(value, name);
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}
