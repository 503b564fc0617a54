import { isDeepStrictEqual } from 'node:util';
import { type GraphQLOutputType } from 'graphql';
import { type GraphqlModule } from './graphql-module.js';
import { type ResolverKind } from './resolver-kind.js';

/**
 * A replay rebuilds the parent of a `@ResolveField()` inside a middleware output from the
 * answer, over the own data kept at the first answer (app-parents.ts). The app's resolver reads
 * its parent's own data, not the answer: a numeric key the schema exposes as `ID` (`7`, written
 * `"7"`), an email its own middleware masks for callers (`a***@…`) are what it read at the
 * first answer only as they were kept (adversary 86). Where the kept data holds a selected
 * field's property, it is kept where the answer is no other value of it:
 * - a field behind middleware: the property is the middleware's input, never its output (a
 *   replay answers the field's stored output at its own place, middleware-outputs.ts);
 * - a leaf (or a list of leaves) read as a property: where GraphQL writes the kept value as the
 *   answer holds it (the same bytes, a `7` as ID's `"7"`); otherwise the answer's (a value
 *   changed on its way out, an error at it).
 * An object is always the answer's: its own parents, members and errors are rebuilt from it.
 */
export function keepsOwnMember(
  graphql: GraphqlModule,
  resolution: ResolverKind,
  type: GraphQLOutputType,
  kept: { has: boolean; value?: unknown },
  wires: readonly unknown[],
): boolean {
  if (!kept.has) return false;
  if (resolution === 'middleware') return true;
  if (resolution !== 'property' || wires.length === 0) return false;
  return wires.every((wire) => writesAs(graphql, type, kept.value, wire));
}

/** Whether GraphQL completes `value` as `type` (leaves, lists of them) into `wire`. */
function writesAs(
  graphql: GraphqlModule,
  type: GraphQLOutputType,
  value: unknown,
  wire: unknown,
): boolean {
  // A null in the answer may be an error's: the answer's (its error answered again).
  if (wire === null || wire === undefined || value === null || value === undefined) return false;
  if (graphql.isNonNullType(type)) return writesAs(graphql, type.ofType, value, wire);
  if (graphql.isListType(type)) {
    if (!Array.isArray(value) || !Array.isArray(wire) || value.length !== wire.length) {
      return false;
    }
    return value.every((item, i) => writesAs(graphql, type.ofType, item, wire[i]));
  }
  if (!graphql.isLeafType(type)) return false;
  try {
    return isDeepStrictEqual(type.serialize(value), wire);
  } catch {
    // Refused by its scalar: not what the answer wrote.
    return false;
  }
}
