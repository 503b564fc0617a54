import { type GraphQLOutputType } from 'graphql';
import { type GraphqlModule } from './graphql-module.js';

/**
 * Whether a field middleware's input (the property Nest's `next()` reads) can be stored by
 * walking it with the field's type: anything but a list type, and for a list type an array
 * (or nothing), or a one-shot iterator (see `isOneShot`). Any other value (a jsonb record, a `Map`, a `Set`) is what the middleware maps
 * to the list: walked, it would be made a list it is not (a record wrapped as `[record]`, a
 * Map's entries), which the middleware reads on a replay, and the first answer too where the
 * walked value is given it (adversary 75b). Kept as it is instead (see `walkValue`).
 */
export function fitsListType(
  graphql: Pick<GraphqlModule, 'isListType' | 'isNonNullType'>,
  type: GraphQLOutputType,
  value: unknown,
): boolean {
  const nullable = graphql.isNonNullType(type) ? type.ofType : type;
  if (!graphql.isListType(nullable)) return true;
  return value === null || value === undefined || Array.isArray(value) || isOneShot(value);
}

/**
 * An iterator (a `Map`'s `keys()`, a generator): read, it is gone, so it cannot be kept for
 * the middleware to read again. It is no container the middleware maps either: GraphQL takes
 * it as a list, as the docs promise of any iterable. So it is read once into an array, walked
 * with the list's type, and the first answer's middleware is given that array, the iterator
 * never read twice (adversary 75c: kept, it was stored as `{}`, every replay an error).
 */
export function isOneShot(value: unknown): boolean {
  if (typeof value !== 'object' || value === null || !(Symbol.iterator in value)) return false;
  const iterator = value as { next?: unknown; [Symbol.iterator]: () => unknown };
  return typeof iterator.next === 'function' && iterator[Symbol.iterator]() === value;
}
