import {
  type FieldNode,
  type FragmentDefinitionNode,
  type GraphQLOutputType,
  type GraphQLSchema,
} from 'graphql';
import { type GraphqlModule } from './graphql-module.js';
import { argumentsOf } from './named-path.js';
import { selectedFields } from './selection.js';

/**
 * The named keys of the fields inside a middleware field's output (each response key as its
 * field's name and arguments, see named-path.ts), by their response-key path under the field:
 * stored with the output (`StoredOutputs.names`), so that a retry that selects them under
 * other aliases, or without the first call's, is answered the first's value of each field,
 * and one that selects a field the first did not is refused (`outputValue`).
 */

/** What of the operation the walk reads: the first answer's selection of the field. */
export interface OutputSelection {
  schema: GraphQLSchema;
  nodes: readonly FieldNode[];
  fragments: Readonly<Record<string, FragmentDefinitionNode>>;
  variables: Readonly<Record<string, unknown>>;
}

/** `key` and `step` joined as an answer key (`items.0.name`); a step alone at the top. */
export function joinKey(key: string, step: string | number): string {
  return key === '' ? String(step) : `${key}.${step}`;
}

/**
 * Each response-key path under the output `value` of a field of `type` (as the answer holds
 * it), with its named path: `memberAt` tells the member of a union or interface at a path
 * under the field (noted at the first answer), else its `__typename`; an object whose member
 * is not told is left out (its fields are then found by their response keys only).
 */
export function namesInside(
  graphql: GraphqlModule,
  selection: OutputSelection,
  type: GraphQLOutputType,
  value: unknown,
  memberAt: (key: string) => string | undefined,
): Record<string, string> {
  const { schema, fragments, variables } = selection;
  const names: Record<string, string> = {};
  const walk = (
    at: GraphQLOutputType,
    held: unknown,
    nodes: readonly FieldNode[],
    key: string,
    named: string,
  ): void => {
    if (held === null || held === undefined) return;
    if (graphql.isNonNullType(at)) return walk(at.ofType, held, nodes, key, named);
    if (graphql.isListType(at)) {
      if (!Array.isArray(held)) return;
      held.forEach((item, i) => walk(at.ofType, item, nodes, joinKey(key, i), joinKey(named, i)));
      return;
    }
    if (typeof held !== 'object' || Array.isArray(held)) return;
    const object = held as Record<string, unknown>;
    let concrete = graphql.isObjectType(at) ? at : undefined;
    if (!concrete) {
      const told = memberAt(key) ?? object.__typename;
      const found = typeof told === 'string' ? schema.getType(told) : undefined;
      if (found && graphql.isObjectType(found)) concrete = found;
    }
    if (!concrete) return;
    const fields = concrete.getFields();
    const inner = { nodes, fragments, variables };
    for (const [name, fieldNodes] of selectedFields(graphql, schema, concrete, inner)) {
      const definition = fields[name];
      if (!definition) continue;
      const byKey = new Map<string, FieldNode[]>();
      for (const node of fieldNodes) {
        const responseKey = node.alias?.value ?? name;
        byKey.set(responseKey, [...(byKey.get(responseKey) ?? []), node]);
      }
      for (const [responseKey, keyed] of byKey) {
        if (!(responseKey in object)) continue;
        const step = name + argumentsOf(graphql, definition, keyed[0], variables);
        const below = joinKey(key, responseKey);
        const namedBelow = joinKey(named, step);
        names[below] = namedBelow;
        walk(definition.type, object[responseKey], keyed, below, namedBelow);
      }
    }
  };
  walk(type, value, selection.nodes, '', '');
  return names;
}
