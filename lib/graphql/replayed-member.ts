import { noteAnsweredMember } from './answered-members.js';
import { itemIndexes, walkAsTold } from './item-indexes.js';
import { noteMember } from './output-paths.js';
import { pathOf } from './stored-at-answer.js';
import { toldMemberOf } from './told-members.js';
import { type GraphQLAbstractType, type GraphQLSchema, type GraphQLTypeResolver } from 'graphql';

/** The member of a union or an interface a replay's object was stored as (see `fromWire`). */
const REPLAYED_MEMBER = Symbol('idempotency.replayedMember');

/**
 * The same, as data a serializer outside `@Idempotent()` copies with the object's own
 * (class-transformer copies enumerable string keys, not a symbol): a replay that went through
 * `ClassSerializerInterceptor` is still told by it (adversary 50a). No field can be so named:
 * names that begin with `__` are GraphQL's own, and GraphQL writes only the selected ones.
 */
export const REPLAYED_MEMBER_KEY = '__replayedMember';

/**
 * Set beside it where the replay's `__typename` is the library's (the stored member's name),
 * not the app's own tag: only then is it taken off with the mark (adversary 52a: an app's
 * `__typename` its resolvers read was deleted).
 */
const REPLAYED_TYPENAME_KEY = '__replayedTypename';

/** The abstract types whose `resolveType()` answers a replay's object first. */
const answering = new WeakSet<object>();

/** The schemas whose abstract types all answer so (`answerMembersOf`). */
const schemasAnswering = new WeakSet<object>();

/**
 * Marks a replay's object as the member `typename` of an abstract type, and makes that type's
 * `resolveType()` answer it so before the app's own runs: the app's may tell members by data
 * the first call's selection did not store (Nest's recipe tells a `Book` by its `title`),
 * which a replay does not have. Any other value goes to the app's `resolveType()` as before.
 * A type without one needs nothing: GraphQL's default reads the object's `__typename`.
 */
export function answerAsMember(
  type: GraphQLAbstractType,
  value: object,
  typename: string,
  ownTypename = false,
): void {
  Object.defineProperty(value, REPLAYED_MEMBER, { value: typename, configurable: true });
  answerFirst(type);
  // A type with no resolveType() of the app's is told by `__typename` (GraphQL's default).
  if (!answeredByWrapper.has(type)) return;
  Object.defineProperty(value, REPLAYED_MEMBER_KEY, {
    value: typename,
    enumerable: true,
    writable: true,
    configurable: true,
  });
  if (ownTypename) return;
  Object.defineProperty(value, REPLAYED_TYPENAME_KEY, {
    value: true,
    enumerable: true,
    writable: true,
    configurable: true,
  });
}

/**
 * Makes every abstract type of `schema` answer a replay's member first, once, before any
 * replay: an executor that compiles an operation (Mercurius with `jit`, graphql-jit) copies
 * each type's `resolveType()` then, so one set at the first replay would come too late for an
 * operation compiled before it (adversary 50a: every replay an error, the compiled operation
 * cached). Called when a mutation's answer is first stored.
 */
export function answerMembersOf(schema: GraphQLSchema | undefined): void {
  if (!schema || schemasAnswering.has(schema)) return;
  schemasAnswering.add(schema);
  for (const type of Object.values(schema.getTypeMap())) {
    // A union's or an interface's (an object type has isTypeOf, not resolveType).
    if ('resolveType' in type) answerFirst(type as GraphQLAbstractType);
  }
}

/**
 * Where the object `resolveType()` is told about sits in the answer, from the path its driver
 * gives (`given`): graphql-jit gives a list item's own path, its indexes in it (it ends in a
 * number), taken as it is; graphql-js gives the list field's (it ends in the field's response
 * key), to which the item's indexes are added (`indexes`: see item-indexes.ts). Undefined where
 * the item's place cannot be told (an object at more than one place of the output): nothing is
 * noted rather than a member at another item's place (a replay then asks the app's own).
 */
export function memberPath(
  given: readonly (string | number)[],
  indexes: () => readonly number[] | undefined,
): (string | number)[] | undefined {
  if (typeof given[given.length - 1] === 'number') return [...given];
  const own = indexes();
  return own && [...given, ...own];
}

/** The abstract types whose `resolveType()` is the wrapper's (they had one of the app's). */
const answeredByWrapper = new WeakSet<object>();

function answerFirst(type: GraphQLAbstractType): void {
  if (answering.has(type)) return;
  answering.add(type);
  const own = type.resolveType;
  if (!own) return;
  const resolveType: GraphQLTypeResolver<unknown, unknown> = (source, context, info, abstract) => {
    const marked = source as Record<string | symbol, unknown> | null;
    const member = marked?.[REPLAYED_MEMBER] ?? marked?.[REPLAYED_MEMBER_KEY];
    if (typeof member !== 'string') {
      // Told by the library ahead of graphql-js, at this field (told-members.ts): answered
      // so, the app's resolveType() run once per value, as without the library.
      const told =
        toldMemberOf(context, source, pathOf(info)) ?? own(source, context, info, abstract);
      // At a mutation's first answer, under field middleware: stored with its output, at the
      // item's own place (see `memberPath`).
      const given = pathOf(info);
      // An item of a list (graphql-js gives the list field's type): placed by its indexes.
      const listed = String((info as { returnType?: unknown }).returnType ?? '').startsWith('[');
      const place = memberPath(given, () => itemIndexes(context, source, given, listed));
      if (place) noteMember(context, place, told);
      // The lists under it placed, by its own member's selection (see `indexItems`).
      if (place) walkAsTold(context, source, place, told);
      return told;
    }
    // Its place noted, for a driver that tells no field's type under it (graphql-jit: see
    // answered-members.ts); a list item only where its own place is given.
    const given = pathOf(info);
    const listed = String((info as { returnType?: unknown }).returnType ?? '').startsWith('[');
    const place = memberPath(given, () => (listed ? undefined : []));
    if (place) noteAnsweredMember(context, place, member);
    // Read, then taken off: the member's own resolvers (a @ResolveField() reading its
    // parent) get the data the first answer gave them, not the replay's marks.
    if (marked && Object.getOwnPropertyDescriptor(marked, REPLAYED_MEMBER_KEY)?.configurable) {
      delete marked[REPLAYED_MEMBER_KEY];
      if (marked[REPLAYED_TYPENAME_KEY] === true) {
        delete marked[REPLAYED_TYPENAME_KEY];
        delete marked.__typename;
      }
    }
    return member;
  };
  type.resolveType = resolveType;
  answeredByWrapper.add(type);
}
