import { type GraphQLOutputType, type GraphQLSchema } from 'graphql';
import { type GraphqlModule } from './graphql-module.js';

/**
 * The list indexes of the union or interface members in a middleware field's output, by the
 * item: graphql-js gives a list item's `resolveType()` the list field's `info`, whose path
 * has no index, so the member the first answer told is noted at the item's own path only by
 * these (adversary 81: every item noted at the list's path, the last member winning). Kept by
 * the operation's context: the same object in two operations is at its own place in each.
 */
const byContext = new WeakMap<object, WeakMap<object, readonly number[]>>();

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
 * Notes the list indexes of each member item in `value`, a field of `type`'s output, relative
 * to the path of the field that holds the list: walks only the fields whose types may hold a
 * list of members (no other property is read).
 */
export function indexItems(
  graphql: GraphqlModule,
  schema: GraphQLSchema,
  context: unknown,
  type: GraphQLOutputType,
  value: unknown,
): void {
  if (typeof context !== 'object' || context === null) return;
  if (!mayHoldMemberList(graphql, type)) return;
  let noted = byContext.get(context);
  if (!noted) byContext.set(context, (noted = new WeakMap()));
  const marks = noted;
  const seen = new Set<object>();
  const walk = (at: GraphQLOutputType, held: unknown, indexes: readonly number[]): void => {
    if (typeof held !== 'object' || held === null) return;
    if (graphql.isNonNullType(at)) return walk(at.ofType, held, indexes);
    if (graphql.isListType(at)) {
      if (!Array.isArray(held)) return;
      held.forEach((item, i) => walk(at.ofType, item, [...indexes, i]));
      return;
    }
    if (seen.has(held)) return;
    seen.add(held);
    const objects = graphql.isAbstractType(at)
      ? schema.getPossibleTypes(at)
      : graphql.isObjectType(at)
        ? [at]
        : [];
    if (graphql.isAbstractType(at) && indexes.length > 0) marks.set(held, indexes);
    for (const object of objects) {
      for (const field of Object.values(object.getFields())) {
        if (!mayHoldMemberList(graphql, field.type)) continue;
        walk(field.type, (held as Record<string, unknown>)[field.name], []);
      }
    }
  };
  walk(type, value, []);
}

/** The list indexes of `source` under the list field GraphQL is completing (see above). */
export function itemIndexes(context: unknown, source: unknown): readonly number[] {
  if (typeof context !== 'object' || context === null) return [];
  if (typeof source !== 'object' || source === null) return [];
  return byContext.get(context)?.get(source) ?? [];
}
