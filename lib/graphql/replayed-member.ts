import { type GraphQLAbstractType, type GraphQLTypeResolver } from 'graphql';

/** The member of a union or an interface a replay's object was stored as (see `fromWire`). */
const REPLAYED_MEMBER = Symbol('idempotency.replayedMember');

/** The abstract types whose `resolveType()` answers a replay's object first. */
const answering = new WeakSet<object>();

/**
 * Marks a replay's object as the member `typename` of an abstract type, and makes that type's
 * `resolveType()` answer it so before the app's own runs: the app's may tell members by data
 * the first call's selection did not store (Nest's recipe tells a `Book` by its `title`),
 * which a replay does not have. Any other value goes to the app's `resolveType()` as before.
 * A type without one needs nothing: GraphQL's default reads the object's `__typename`.
 */
export function answerAsMember(type: GraphQLAbstractType, value: object, typename: string): void {
  Object.defineProperty(value, REPLAYED_MEMBER, { value: typename });
  if (answering.has(type)) return;
  answering.add(type);
  const own = type.resolveType;
  if (!own) return;
  const resolveType: GraphQLTypeResolver<unknown, unknown> = (source, context, info, abstract) => {
    const member = (source as { [REPLAYED_MEMBER]?: unknown } | null)?.[REPLAYED_MEMBER];
    return typeof member === 'string' ? member : own(source, context, info, abstract);
  };
  type.resolveType = resolveType;
}
