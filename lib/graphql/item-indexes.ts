import { type FieldNode, type GraphQLObjectType, type GraphQLOutputType } from 'graphql';
import { listItems } from './completed-output.js';
import { type GraphqlModule } from './graphql-module.js';
import { nestField } from './nest-fields.js';
import { fieldResolution } from './resolved-fields.js';
import { joinKey, type OutputSelection } from './output-names.js';
import { selectedFields } from './selection.js';

/**
 * The list indexes of the union or interface members in a middleware field's output:
 * graphql-js gives a list item's `resolveType()` the list field's `info`, whose path has no
 * index, so the member the first answer told is noted at the item's own place only by these
 * (adversary 81: every item noted at the list's path, the last member winning).
 *
 * Kept by the operation's context (the same object in two operations is at its own place in
 * each), then by the list field's path in the answer (response keys, with the indexes of the
 * items above it, as graphql-js gives it), then by the item: each path is one list (each
 * alias's own, each parent's own: adversary 83, the same objects under two aliases of one
 * field, or in the lists of two parents), an object may sit at several places of it (a payee
 * paid twice), in the order graphql-js completes them (a list's items in order, depth first),
 * and the n-th `resolveType()` of that item at that path takes the n-th place (adversary 82).
 */
const byContext = new WeakMap<object, Map<string, WeakMap<object, (readonly number[])[]>>>();
/** How many times each item was told at each list path (see above), by context. */
const told = new WeakMap<object, Map<string, WeakMap<object, number>>>();

/**
 * The walks of abstract items waiting for their member (see `indexItems`), by context, then by
 * the item's place in the answer (response keys and indexes), then by the item.
 */
const waiting = new WeakMap<object, Map<string, WeakMap<object, (member: string) => void>>>();

function deferWalk(context: object, at: string, item: object, walk: (member: string) => void) {
  let byPlace = waiting.get(context);
  if (!byPlace) waiting.set(context, (byPlace = new Map()));
  let byItem = byPlace.get(at);
  if (!byItem) byPlace.set(at, (byItem = new WeakMap()));
  byItem.set(item, walk);
}

/** Runs `run`; a walk that fails leaves its items unplaced (see `itemIndexes`). */
function attempt(run: () => void): void {
  try {
    run();
  } catch {
    // Unmarked: its list items' members are not noted.
  }
}

/**
 * Walks `source`, at `place` of the answer, as the member `told` (a name, an object type, or
 * a Promise of either, as a `resolveType()` answers), where `indexItems` left it waiting for
 * its member: called by the `resolveType()` wrapper before GraphQL completes the item's fields
 * (the places of the lists under it noted before their own items are told), once.
 */
export function walkAsTold(
  context: unknown,
  source: unknown,
  place: readonly (string | number)[],
  told: unknown,
): void {
  if (typeof context !== 'object' || context === null) return;
  if (typeof source !== 'object' || source === null) return;
  const byItem = waiting.get(context)?.get(place.join('.'));
  const walk = byItem?.get(source);
  if (!byItem || !walk) return;
  byItem.delete(source);
  const run = (name: unknown) => {
    const member =
      typeof name === 'string' ? name : (name as { name?: unknown } | null | undefined)?.name;
    if (typeof member === 'string') attempt(() => walk(member));
  };
  // A Promise's callbacks run in the order they were given: this before GraphQL's.
  if (told instanceof Promise) told.then(run, () => undefined);
  else run(told);
}

/** Whether a list of a union or an interface may be at or under `type`, by type. */
const holdsMembers = new WeakMap<object, boolean>();

/** The paths (response keys and indexes, joined) whose values `indexItems` read, by context. */
const readPaths = new WeakMap<object, Set<string>>();

/**
 * Marks the value of a field GraphQL resolved inside a middleware output, at `path`, where
 * the walk of that output did not read it (a getter: see `indexItems`): the objects GraphQL
 * completes are the ones marked, and the getter is read once, by GraphQL (adversary 83: a
 * getter that loads anew on each read left its items with no place).
 */
export function indexItemsUnread(
  graphql: GraphqlModule,
  selection: OutputSelection,
  context: unknown,
  type: GraphQLOutputType,
  value: unknown,
  path: readonly (string | number)[],
): void {
  if (typeof context !== 'object' || context === null) return;
  if (readPaths.get(context)?.has(path.join('.'))) return;
  attempt(() => indexItems(graphql, selection, context, type, value, path));
}

/** Whether `name` is a getter of `held` (its own, or its class's): never read by the walk. */
function isAccessor(held: object, name: string): boolean {
  for (let at: object | null = held; at; at = Object.getPrototypeOf(at) as object | null) {
    const own = Object.getOwnPropertyDescriptor(at, name);
    if (own) return !('value' in own);
  }
  return false;
}

/** Whether a list of a union's or an interface's members may be at or under `type`. */
export function mayHoldMemberList(graphql: GraphqlModule, type: GraphQLOutputType): boolean {
  const listed = (at: GraphQLOutputType): boolean => {
    const inner = graphql.isNonNullType(at) ? at.ofType : at;
    if (!graphql.isListType(inner)) return false;
    return graphql.isAbstractType(graphql.getNamedType(inner)) || listed(inner.ofType);
  };
  if (listed(type)) return true;
  // Under its fields, by its named type (a list of it or not alike).
  const named = graphql.getNamedType(type);
  const known = holdsMembers.get(named);
  if (known !== undefined) return known;
  holdsMembers.set(named, false);
  const objects = graphql.isAbstractType(named) ? [] : graphql.isObjectType(named) ? [named] : [];
  const found = objects.some((object) =>
    Object.values(object.getFields()).some((field) => mayHoldMemberList(graphql, field.type)),
  );
  holdsMembers.set(named, found);
  return found;
}

/**
 * Notes the list indexes of each member item in `value`, the output of the field at `path`
 * (its response keys and indexes) of `type`, by the path of the list field that holds it (see
 * above): walks only the fields the operation selects (`selection`, the field's own: through
 * fragments, `@skip` and `@include` read as GraphQL reads them), each response key its own
 * path, whose types may hold a list of members; no other property is read (adversary 83: a
 * getter that loads a relation the operation does not select was called), each read by the
 * property Nest reads. The selection bounds the walk (a cycle of objects ends with it).
 *
 * A Promise at any depth (a list loaded asynchronously, each item a DataLoader's `load()`) is
 * walked when it settles: placed by what it settles to, which is what GraphQL completes
 * (adversary 84: the Promise placed, the row never found). An abstract item whose type has a
 * `resolveType()` is walked only for its own member's selection, once that `resolveType()` has
 * told it (`walkAsTold`), before GraphQL completes its fields: a `Card` is not read for the
 * fields a `... on Bank` selects (adversary 84: a card's own getter of that name was called).
 */
export function indexItems(
  graphql: GraphqlModule,
  selection: OutputSelection,
  context: unknown,
  type: GraphQLOutputType,
  value: unknown,
  path: readonly (string | number)[],
): void {
  if (typeof context !== 'object' || context === null) return;
  if (!mayHoldMemberList(graphql, type)) return;
  const { schema, fragments, variables } = selection;
  let read = readPaths.get(context);
  if (!read) readPaths.set(context, (read = new Set()));
  let noted = byContext.get(context);
  if (!noted) byContext.set(context, (noted = new Map()));
  const marks = noted;
  const place = (list: string, held: object, indexes: readonly number[]) => {
    let byItem = marks.get(list);
    if (!byItem) marks.set(list, (byItem = new WeakMap()));
    const places = byItem.get(held);
    if (places) places.push(indexes);
    else byItem.set(held, [indexes]);
  };
  const walk = (
    at: GraphQLOutputType,
    held: unknown,
    nodes: readonly FieldNode[],
    list: string,
    indexes: readonly number[],
  ): void => {
    if (typeof held !== 'object' || held === null) return;
    if (held instanceof Promise) {
      // Registered before GraphQL reads the Promise, so this runs before it completes it.
      held.then(
        (settled) => attempt(() => walk(at, settled, nodes, list, indexes)),
        () => undefined,
      );
      return;
    }
    if (graphql.isNonNullType(at)) return walk(at.ofType, held, nodes, list, indexes);
    if (graphql.isListType(at)) {
      // An array, or an iterable GraphQL reads again alike (a `Set`): the same objects.
      const items = listItems(held);
      items?.forEach((item, i) => walk(at.ofType, item, nodes, list, [...indexes, i]));
      return;
    }
    if (graphql.isAbstractType(at) && indexes.length > 0) place(list, held, indexes);
    const own = indexes.reduce<string>((key, i) => joinKey(key, i), list);
    const fieldsOf = (object: GraphQLObjectType) => {
      const fields = object.getFields();
      const chosen = selectedFields(graphql, schema, object, { nodes, fragments, variables });
      for (const [each, fieldNodes] of chosen) {
        const definition = fields[each];
        if (!definition || !mayHoldMemberList(graphql, definition.type)) continue;
        // Behind middleware of its own: the property is the middleware's input, never what
        // GraphQL completes (a filtered list: other items, other indexes); that field's own
        // wrapper marks its output (middleware-outputs.ts; adversary 89).
        if (fieldResolution(object, each) === 'middleware') continue;
        const property = nestField(object.name, each)?.property ?? each;
        // A getter is GraphQL's to read, once: what it gives (new objects on each read, a
        // load) is marked as GraphQL resolves its field (`indexItemsUnread`, adversary 83).
        if (isAccessor(held, property)) continue;
        const inner = (held as Record<string, unknown>)[property];
        // Each response key its own list (two aliases, each with its own selection).
        const keys = [...new Set(fieldNodes.map((node) => node.alias?.value ?? each))];
        for (const responseKey of keys) read.add(joinKey(own, responseKey));
        if (typeof inner !== 'object' || inner === null) continue;
        for (const responseKey of keys) {
          const same = fieldNodes.filter((node) => (node.alias?.value ?? each) === responseKey);
          walk(definition.type, inner, same, joinKey(own, responseKey), []);
        }
      }
    };
    if (graphql.isObjectType(at)) return fieldsOf(at);
    if (!graphql.isAbstractType(at)) return;
    if (typeof at.resolveType === 'function') {
      // Walked as the member its resolveType() tells (see `walkAsTold`).
      deferWalk(context, own, held, (member) => {
        const object = schema.getType(member);
        if (object && graphql.isObjectType(object)) fieldsOf(object);
      });
      return;
    }
    // GraphQL's default: the value's `__typename`, else each member's `isTypeOf()`, not
    // told here: each member's selection read.
    const typename = (held as { __typename?: unknown }).__typename;
    const object = typeof typename === 'string' ? schema.getType(typename) : undefined;
    if (object && graphql.isObjectType(object)) return fieldsOf(object);
    for (const each of schema.getPossibleTypes(at)) fieldsOf(each);
  };
  walk(type, value, selection.nodes, path.join('.'), []);
}

/**
 * The list indexes of `source` under the field at `path` that GraphQL is completing (see
 * above): [] where the field is no list (`listed`: its type is one), the path its own;
 * undefined where its place cannot be told, an item of a list with no place noted (a list the
 * walk did not read: under a field the app resolves, a getter that gives new objects each
 * read), so that nothing is noted rather than a member at the list's path (adversary 83).
 */
export function itemIndexes(
  context: unknown,
  source: unknown,
  path: readonly (string | number)[],
  listed = false,
): readonly number[] | undefined {
  const none = listed ? undefined : [];
  if (!listed) return none;
  if (typeof context !== 'object' || context === null) return none;
  if (typeof source !== 'object' || source === null) return none;
  const at = path.join('.');
  const places = byContext.get(context)?.get(at)?.get(source);
  if (!places) return none;
  let counts = told.get(context);
  if (!counts) told.set(context, (counts = new Map()));
  let byItem = counts.get(at);
  if (!byItem) counts.set(at, (byItem = new WeakMap()));
  const n = byItem.get(source) ?? 0;
  byItem.set(source, n + 1);
  return places[n % places.length];
}
