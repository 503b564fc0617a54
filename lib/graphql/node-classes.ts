import { transformedClassNamed, transformedClassOf } from './class-transforms.js';
import { classGetters } from './class-tree.js';
import { keepData, restoreData } from './kept-data.js';
import { adoptsNode } from './parent-identity.js';
import { readGraphNodes, type Graph } from './typed-graph.js';

/**
 * The classes class-transformer knows among the objects of the answer's shared graph
 * (parent-graph.ts), named once per node (`c` beside its nodes: `{ [node]: { c, g } }`), not
 * by path from each parent: a path tree per parent walked, and stored, an order every line
 * points back at again from each line (adversary 107: 32 s at 4,000 lines), and a replay
 * named a copy of it per parent (`line.order !== otherLine.order`). A replay names each node's
 * object itself, once, so what the parents share stays one object.
 */

/** A node's class: its name (`c`), and what its getters gave (`g`, as `ClassTree`'s). */
export interface NodeClass {
  c: string;
  g?: unknown;
  /**
   * Reached from an object's `__kept`, which a serializer reads as the answer: a replay that
   * cannot tell its class answers an error (`namedByTree`'s), never it plain, unmasked.
   */
  k?: 1;
}

/** The class to name a written object by, and whether its name is another class's too. */
export interface ClassNaming {
  name: string;
  /** A replay cannot tell which class of that name it was (see `transformedClassNamed`). */
  twin: boolean;
}

/**
 * How an object of the graph is named again on a replay: by the class class-transformer knows
 * it as (never an array, which a serializer walks into as a list), or not at all. `named`
 * is class-transformer's lookup by name (`transformedClassNamed`).
 */
export function classNaming(
  value: object,
  known: ((value: object) => { name: string } | undefined) | undefined,
  named: (name: string) => unknown,
): ClassNaming | undefined {
  if (Array.isArray(value)) return undefined;
  const of = known?.(value);
  if (!of) return undefined;
  return { name: of.name, twin: named(of.name) !== of };
}

/**
 * The classes of the graph's nodes (`nodes`: each object written, by its node), and the node
 * of each object whose class's name another class has too (`twins`, for the log). Each object
 * once: linear in the graph, whatever its parents share.
 */
export function nodeClasses(nodes: ReadonlyMap<object, number>): {
  classes: Record<string, NodeClass>;
  twins: Map<number, string>;
} {
  const classes: Record<string, NodeClass> = {};
  const twins = new Map<number, string>();
  /** `transformedClassNamed` once per name: it reads all of class-transformer's metadata. */
  const byName = new Map<string, unknown>();
  const named = (name: string) => {
    if (!byName.has(name)) byName.set(name, transformedClassNamed(name));
    return byName.get(name);
  };
  for (const [value, node] of nodes) {
    const naming = classNaming(value, transformedClassOf, named);
    if (!naming) continue;
    const entry: NodeClass = { c: naming.name };
    // A transform of the class may read its getters (`obj.hidePhone`): read now, given to a
    // replay as data that is not enumerable, as a getter is not (adversary 52a).
    const gotten = classGetters(value, {});
    if (Object.keys(gotten).length > 0) entry.g = keepData(gotten).kept;
    classes[String(node)] = entry;
    if (naming.twin) twins.set(node, naming.name);
  }
  return { classes, twins };
}

/**
 * Names each object of a read graph (`made`, by node) by its class in `classes` (see
 * `nodeClasses`), in place: its `constructor` (not enumerable) that class, as a replay names
 * an object of a path tree (class-tree.ts `namedByTree`), its getters' values beside its data.
 * A class this process cannot tell (two of that name) leaves it plain, and `unnamed` is told;
 * throws where a serializer reads it as the answer (`k`).
 */
export function nameNodes(
  made: readonly unknown[],
  classes: unknown,
  unnamed: (className: string) => void,
): void {
  if (typeof classes !== 'object' || classes === null) return;
  for (const [index, entry] of Object.entries(classes as Record<string, unknown>)) {
    const value = made[Number(index)];
    if (typeof value !== 'object' || value === null || Array.isArray(value)) continue;
    if (typeof entry !== 'object' || entry === null) continue;
    const { c, g, k } = entry as Partial<NodeClass>;
    if (typeof c !== 'string') continue;
    const target = transformedClassNamed(c);
    if (!target && k === 1) {
      throw new Error(
        `the stored answer held an instance of ${c}, which class-transformer does not know as ` +
          'one class in this process: replayed without it, its transforms would not apply',
      );
    }
    if (!target) {
      unnamed(c);
      continue;
    }
    if (!hasOwn(value, 'constructor')) {
      Object.defineProperty(value, 'constructor', {
        value: target,
        writable: true,
        configurable: true,
      });
    }
    for (const [name, item] of Object.entries(restoreData(g))) {
      if (hasOwn(value, name)) continue;
      Object.defineProperty(value, name, {
        value: item,
        enumerable: false,
        writable: true,
        configurable: true,
      });
    }
  }
}

function hasOwn(value: object, name: string): boolean {
  return Object.prototype.hasOwnProperty.call(value, name);
}

/** Reads one node of the answer's shared graph; `unnamed` as `nameNodes`' (see `namedReader`). */
export type SharedRead = ((index: number, unnamed?: (className: string) => void) => unknown) & {
  /**
   * The node of a parent's own object (`s`, parent-graph.ts) to make that parent
   * (parent-identity.ts): undefined for none or one not of its own data; one made a parent
   * at an earlier place of this replay again (one object at two places is one object).
   */
  adopt?: (index: number | undefined) => object | undefined;
};

/**
 * A stored answer's shared graph read once, on the first of its nodes asked for, its objects
 * named by their classes (`nameNodes`, told `unnamed` of that first read): every parent of one
 * replay gets its data from the same objects, shared as they were.
 */
export function namedReader(graph: unknown): SharedRead {
  let made: unknown[] | undefined;
  let failure: unknown;
  const read = (index: number, unnamed?: (className: string) => void): unknown => {
    if (typeof graph !== 'object' || graph === null) return undefined;
    if (!Array.isArray((graph as Partial<Graph>).g)) return undefined;
    if (failure) throw failure;
    if (!made) {
      const read = readGraphNodes(graph as Graph);
      try {
        nameNodes(read, (graph as { c?: unknown }).c, (name) => unnamed?.(name));
      } catch (error) {
        // The whole replay answers it, whichever object reads the graph first or after.
        failure = error;
        throw error;
      }
      made = read;
    }
    return made[index];
  };
  const taken = new Set<number>();
  const adopt = (index: number | undefined): object | undefined => {
    if (index === undefined) return undefined;
    const node = read(index);
    if (!adoptsNode(node, taken.has(index))) return undefined;
    taken.add(index);
    return node;
  };
  return Object.assign(read, { adopt });
}
