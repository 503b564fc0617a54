import { defineOwn } from './own-member.js';

/**
 * An array's own members that are no items (`Object.defineProperty(page, 'total', { value: 43
 * })`: a page's total count kept on the page itself, out of JSON; or plain, enumerable) are
 * data a parent's `@ResolveField()` reads (`order.lines.total`). A SELECTED list field is
 * stored as its items' wire form, and a replay's parent held the list rebuilt from them:
 * items only, the member gone, and a committed mutation replayed `data: null` (adversary
 * 112). What this file decides is what of such a list the parent's kept data holds beside
 * the answer (`__parent`, under the field's property), and how a replay gives it back onto the
 * rebuilt list.
 */

/**
 * The member of a kept list's record (list-shapes.ts) that names its holes: the library's, never
 * the app's, so never given back as a member. Registered, as the graph of the parents' data
 * writes a member under a symbol only where another process knows it.
 */
export const LIST_HOLES = Symbol.for('nestjs-idempotency.list-holes');

/**
 * Whether `list` is a collection a list field may be: an array, a `Set`, a `Map`, a typed
 * array (rereadable-lists.ts). Only these hold a list's record of what is no item.
 */
export function isListCollection(list: unknown): list is object {
  if (typeof list !== 'object' || list === null) return false;
  if (Array.isArray(list) || list instanceof Set || list instanceof Map) return true;
  return ArrayBuffer.isView(list) && !(list instanceof DataView);
}

/**
 * Whether `key` is one of the collection's items or an array's `length` (its node holds those):
 * an index below its length, for an array or a typed array; a `Set`'s and a `Map`'s items are
 * no members at all.
 */
function isItemOrLength(key: string | symbol, list: object): boolean {
  if (key === 'length' && Array.isArray(list)) return true;
  if (typeof key !== 'string' || !/^(?:0|[1-9]\d*)$/.test(key)) return false;
  const length = Array.isArray(list) || ArrayBuffer.isView(list) ? (list as unknown[]).length : 0;
  return Number(key) < length;
}

/**
 * An empty array holding `list`'s own data members that are no items, each defined as it was
 * (its enumerability, its writability), in their order; undefined where it has none (nothing
 * is kept for a bare list). A getter is not read (it may load or throw), a member under a
 * symbol no other process knows is no data (typed-graph.ts leaves both out alike). `list` is
 * any collection a list field may be (`isListCollection`): a `Set`'s own members alike.
 */
export function listMembers(list: object): unknown[] | undefined {
  let kept: unknown[] | undefined;
  for (const key of Reflect.ownKeys(list)) {
    if (isItemOrLength(key, list)) continue;
    if (typeof key === 'symbol' && Symbol.keyFor(key) === undefined) continue;
    const descriptor = Reflect.getOwnPropertyDescriptor(list, key);
    if (!descriptor || !('value' in descriptor)) continue;
    kept ??= [];
    Object.defineProperty(kept, key, {
      value: descriptor.value as unknown,
      enumerable: descriptor.enumerable === true,
      writable: descriptor.writable === true,
      configurable: true,
    });
  }
  return kept;
}

/**
 * `kept`'s own members that are no items (`listMembers`' array, read back, or a list's record:
 * list-shapes.ts) defined onto the rebuilt list `target`, each as it was kept, where `target`
 * lacks it; nothing where either is no collection (`isListCollection`). Its items are the
 * answer's, never `kept`'s; the record's `LIST_HOLES` is the library's, never a member.
 */
export function withListMembers(target: unknown, kept: unknown): void {
  if (!isListCollection(target) || !isListCollection(kept)) return;
  for (const key of Reflect.ownKeys(kept)) {
    if (key === LIST_HOLES || isItemOrLength(key, kept)) continue;
    if (Object.prototype.hasOwnProperty.call(target, key)) continue;
    const descriptor = Reflect.getOwnPropertyDescriptor(kept, key)!;
    if (!('value' in descriptor)) continue;
    if (descriptor.enumerable && typeof key === 'string') {
      defineOwn(target, key, descriptor.value);
      continue;
    }
    Object.defineProperty(target, key, { ...descriptor, configurable: true });
  }
}

/**
 * Whether the parent's kept data holds a selected list's array ITSELF rather than
 * `listMembers`' copy: where the graph of the parents' data holds the array at another place
 * (an ORM's hidden snapshot of the relation, `order.snapshot.lines`), or one of its items (the
 * page's own `primary`, a `byId` Map's entry). One object answered at two places is one node
 * (adversary 114): a copy beside the array made the replay's `order.lines` another array than
 * `order.snapshot.lines`, and `lines.primary` a copy of the line, no item of the list. Where
 * nothing else reaches it, the copy stays: the array's items are the answer's, and writing
 * them again into the graph would grow the stored answer for nothing.
 */
export function keepsListItself(
  list: readonly unknown[],
  inGraph: (item: object) => boolean,
): boolean {
  if (inGraph(list)) return true;
  return list.some((item) => typeof item === 'object' && item !== null && inGraph(item));
}

/**
 * Whether a replay answers `kept` (the array itself, read back from the parent's kept data:
 * `keepsListItself`) as the selected list rather than the list it rebuilt from the answer
 * (`rebuilt`): both arrays of one length, so that each of the answer's items has its place in
 * the kept array. `listMembers`' copy (no items) of a list that had some is no such array: its
 * members go onto the rebuilt list (`withListMembers`).
 */
export function adoptsList(rebuilt: unknown, kept: unknown): kept is unknown[] {
  return Array.isArray(rebuilt) && Array.isArray(kept) && rebuilt.length === kept.length;
}

/**
 * The objects the lists kept itself (`keepsListItself`) hold, at any depth of lists within
 * them (a `[[Line]]` page of rows): each is a node a replay makes the answer's item there
 * (wire-value.ts `keptList`), so that its node needs none of the data the answer holds
 * (adversary 116: a page's rows written whole, their selected `body` stored twice). Arrays
 * within are walked, never items themselves.
 */
export function keptListItems(lists: readonly (readonly unknown[])[]): Set<object> {
  const items = new Set<object>();
  const seen = new Set<object>();
  const queue: (readonly unknown[])[] = [...lists];
  while (queue.length > 0) {
    const list = queue.pop()!;
    if (seen.has(list)) continue;
    seen.add(list);
    for (const item of list) {
      if (Array.isArray(item)) queue.push(item);
      else if (typeof item === 'object' && item !== null) items.add(item);
    }
  }
  return items;
}
