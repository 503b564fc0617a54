import { transformedClassNamed, transformedClassOf } from './class-transforms.js';
import { plainNaming } from './nest-fields.js';

/**
 * Where, in a value stored as data (a JSON scalar's, a getter's), objects of classes
 * class-transformer knows are, by path: a serializer outside `@Idempotent()` goes into arrays
 * and objects and transforms each (an `@Exclude()`d token of a `Device` in a list), so a replay
 * names each such class again where it was (adversary 51a). `c`: the class's name at this
 * place; `k`: the places under it that hold some, by key (an array's by index).
 */
export interface ClassTree {
  c?: string;
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
    }
  }
  for (const [key, item] of Object.entries(value)) {
    const under = classTreeOf(item, twins, seen, depth + 1);
    if (under) (tree.k ??= {})[key] = under;
  }
  seen.delete(value);
  return tree.c !== undefined || tree.k !== undefined ? tree : undefined;
}

/**
 * `value` (plain data, as stored) with each place of `tree` named by its class again: a plain
 * object whose `constructor` (not enumerable) is that class, holding the same data. Throws
 * where the class is not one class class-transformer knows in this process: replayed without
 * it, its transforms would not apply (a masked value shown).
 */
export function namedByTree(value: unknown, tree: unknown): unknown {
  if (typeof tree !== 'object' || tree === null) return value;
  if (typeof value !== 'object' || value === null) return value;
  const { c, k } = tree as ClassTree;
  if (k) {
    const holder = value as Record<string, unknown>;
    for (const [key, under] of Object.entries(k)) {
      if (key in holder) holder[key] = namedByTree(holder[key], under);
    }
  }
  if (typeof c !== 'string' || Array.isArray(value)) return value;
  const target = transformedClassNamed(c);
  if (!target) {
    throw new Error(
      `the stored answer held an instance of ${c}, which class-transformer does not know as ` +
        'one class in this process: replayed without it, its transforms would not apply',
    );
  }
  return Object.assign(plainNaming(target), value);
}
