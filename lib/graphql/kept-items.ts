import { adoptsNode } from './parent-identity.js';
import { adoptsList } from './list-members.js';

/**
 * A selected list kept itself (list-members.ts `keepsListItself`: the parents' data holds it, or
 * an item of it, at another place) is the array a replay answers, each of its places one of
 * the graph's nodes, as each was one object at the first call. What this file decides is how
 * one place of it is given back, from the item the replay rebuilt of the answer (`built`) and
 * the node the kept array holds there (`kept`). One rule at every depth: an object item is
 * its node, whatever it is (adversary 116: a `[Date]` list whose item `order.next` names was
 * a rebuilt Date, and a `[[Int]]` grid whose row `order.header` names a rebuilt row, so
 * `indexOf` answered -1 where the first call answered 1 and 0).
 */
export type KeptItem =
  /** The kept node as it is: the first call's value (a leaf's Date, the one object). */
  | 'kept'
  /** The answer's rebuilt item: no node to make it (a number, a string, a node of another kind). */
  | 'built'
  /** A list within the list: the kept array made the rebuilt one, its places by this rule again. */
  | 'list'
  /** An object of the answer's data: made the node (parent-identity.ts `ontoNode`). */
  | 'node';

/**
 * How the place of a kept list holding `kept` is given back, where the replay rebuilt `built`
 * there. `taken`: `kept` was made an object of the answer already (another place adopted it).
 */
export function keptItem(built: unknown, kept: unknown, taken: boolean): KeptItem {
  if (built === kept) return 'kept';
  if (typeof built !== 'object' || built === null) return 'built';
  if (Array.isArray(built)) return adoptsList(built, kept) ? 'list' : 'built';
  if (adoptsNode(kept, taken)) return taken ? 'kept' : 'node';
  // A leaf's value that is an object (a Date, a scalar's class): the replay rebuilt it of its
  // wire form, equal to the first call's value, which the kept node is. Only a node of its very
  // class: one the graph wrote as what it is (a Date, a Map), never an object of the answer.
  if (typeof kept !== 'object' || kept === null || Array.isArray(kept)) return 'built';
  const prototype = Object.getPrototypeOf(built) as unknown;
  if (prototype === Object.prototype || prototype === null) return 'built';
  return Object.getPrototypeOf(kept) === prototype ? 'kept' : 'built';
}
