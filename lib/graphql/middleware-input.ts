import { type GraphQLOutputType } from 'graphql';
import { type GraphqlModule } from './graphql-module.js';

/**
 * Whether a field middleware's input (the property Nest's `next()` reads) can be stored by
 * walking it with the field's type: anything but a list type, and for a list type an array
 * (or nothing). Any other value (a jsonb record, a `Map`, a `Set`) is what the middleware maps
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
  return value === null || value === undefined || Array.isArray(value);
}
