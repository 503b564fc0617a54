import { type GraphQLError } from 'graphql';
import { type GraphqlModule } from './graphql-module.js';

/** The `extensions.code` of the error a replay answers for a field the first did not select. */
export const FIELD_NOT_STORED = 'field_not_stored';

/**
 * What a retry gets for a field that its key's first call did not select: a mutation's answer
 * is stored as far as that call selected it (GraphQL reads no more of the value, and the rest
 * may link back, load or be large), so the field has no stored value. Refused rather than
 * answered null: a null would say the value has none. GraphQL answers the error in `errors`
 * with the field's path, and the field null (or, when it is non-null, its nearest nullable
 * parent), as for any field's error.
 */
export function notStoredFieldMessage(type: string, field: string): string {
  return (
    `The field ${type}.${field} was not selected by the first call with this idempotency key: ` +
    'a replay answers what the first call selected, and no more. Select the same fields as ' +
    'the first call, or use a new key for a new operation.'
  );
}

/** The error a replay's resolver throws for the field (see `notStoredFieldMessage`). */
export function notStoredField(graphql: GraphqlModule, type: string, field: string): GraphQLError {
  return new graphql.GraphQLError(notStoredFieldMessage(type, field), {
    extensions: { code: FIELD_NOT_STORED },
  });
}
