import { type GraphQLOutputType, type GraphQLSchema } from 'graphql';
import { type GraphqlModule } from './graphql-module.js';

/**
 * The list indexes of the union or interface members in a middleware field's output:
 * graphql-js gives a list item's `resolveType()` the list field's `info`, whose path has no
 * index, so the member the first answer told is noted at the item's own place only by these
 * (adversary 81: every item noted at the list's path, the last member winning).
 *
 * Kept by the operation's context (the same object in two operations is at its own place in
 * each), then by the item and the name of the list field that holds it: an object may sit at
 * several places (a payee paid twice, one object per payee from a DataLoader; the same objects
 * in two lists), so each list field has its own places of the item, in the order graphql-js
 * completes them (a list's items in order, depth first), and the n-th `resolveType()` of that
 * item at one path of that field takes the n-th place (adversary 82). Where the places cannot
 * be told apart (the item under the same field name of two parents), none is given: nothing is
 * noted rather than another item's place.
 */
interface Places {
  /** The list field's value the places are in. */
  list: object;
  places: (readonly number[])[];
}

const byContext = new WeakMap<object, WeakMap<object, Map<string, Places | null>>>();
/** The list values walked, by context: walked again (a shared result), nothing new. */
const walkedLists = new WeakMap<object, WeakSet<object>>();
/** How many times each item was told at each list path (see above), by context. */
const told = new WeakMap<object, Map<string, WeakMap<object, number>>>();

/** Whether a list of a union or an interface may be at or under `type`, by type. */
const holdsMembers = new WeakMap<object, boolean>();

function mayHoldMemberList(graphql: GraphqlModule, type: GraphQLOutputType): boolean {
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
 * Notes the list indexes of each member item in `value`, the output of field `name` of
 * `type`, relative to the path of the field that holds the list (see above): walks only the
 * fields whose types may hold a list of members (no other property is read).
 */
export function indexItems(
  graphql: GraphqlModule,
  schema: GraphQLSchema,
  context: unknown,
  type: GraphQLOutputType,
  value: unknown,
  name: string,
): void {
  if (typeof context !== 'object' || context === null) return;
  if (!mayHoldMemberList(graphql, type)) return;
  let noted = byContext.get(context);
  if (!noted) byContext.set(context, (noted = new WeakMap()));
  let lists = walkedLists.get(context);
  if (!lists) walkedLists.set(context, (lists = new WeakSet()));
  const marks = noted;
  const walked = lists;
  const seen = new Set<object>();
  const place = (held: object, field: string, list: object, indexes: readonly number[]) => {
    let byField = marks.get(held);
    if (!byField) marks.set(held, (byField = new Map()));
    const known = byField.get(field);
    if (known === undefined) byField.set(field, { list, places: [indexes] });
    else if (known !== null && known.list === list) known.places.push(indexes);
    // Under the same field name of another parent: which is which cannot be told.
    else byField.set(field, null);
  };
  const walk = (
    at: GraphQLOutputType,
    held: unknown,
    field: { name: string; list: object },
    indexes: readonly number[],
  ): void => {
    if (typeof held !== 'object' || held === null) return;
    if (graphql.isNonNullType(at)) return walk(at.ofType, held, field, indexes);
    if (graphql.isListType(at)) {
      if (!Array.isArray(held)) return;
      held.forEach((item, i) => walk(at.ofType, item, field, [...indexes, i]));
      return;
    }
    if (graphql.isAbstractType(at) && indexes.length > 0)
      place(held, field.name, field.list, indexes);
    if (seen.has(held)) return;
    seen.add(held);
    const objects = graphql.isAbstractType(at)
      ? schema.getPossibleTypes(at)
      : graphql.isObjectType(at)
        ? [at]
        : [];
    for (const object of objects) {
      for (const each of Object.values(object.getFields())) {
        if (!mayHoldMemberList(graphql, each.type)) continue;
        const inner = (held as Record<string, unknown>)[each.name];
        if (typeof inner !== 'object' || inner === null || walked.has(inner)) continue;
        walked.add(inner);
        walk(each.type, inner, { name: each.name, list: inner }, []);
      }
    }
  };
  if (typeof value !== 'object' || value === null || walked.has(value)) return;
  walked.add(value);
  walk(type, value, { name, list: value }, []);
}

/**
 * The list indexes of `source` under the list field `name` at `path` that GraphQL is
 * completing (see above): [] where it is in no list; undefined where its place cannot be told.
 */
export function itemIndexes(
  context: unknown,
  source: unknown,
  name: string,
  path: readonly (string | number)[],
): readonly number[] | undefined {
  if (typeof context !== 'object' || context === null) return [];
  if (typeof source !== 'object' || source === null) return [];
  const byField = byContext.get(context)?.get(source);
  if (!byField) return [];
  const known = byField.get(name);
  // In no list of that field (a single member there): the path is its own.
  if (known === undefined) return [];
  if (known === null) return undefined;
  let counts = told.get(context);
  if (!counts) told.set(context, (counts = new Map()));
  const at = path.join('.');
  let byItem = counts.get(at);
  if (!byItem) counts.set(at, (byItem = new WeakMap()));
  const n = byItem.get(source) ?? 0;
  byItem.set(source, n + 1);
  return known.places[n % known.places.length];
}
