import {
  type FieldNode,
  type FragmentDefinitionNode,
  type GraphQLObjectType,
  type GraphQLResolveInfo,
  type GraphQLSchema,
  type OperationDefinitionNode,
} from 'graphql';
import { configure } from 'safe-stable-stringify';
import { type GraphqlModule } from './graphql-module.js';
import { selectedFields } from './selection.js';

/**
 * A field's place in the answer by what it is, not by what the operation calls it: each
 * response key as its field's name and arguments (`tags`, `items({"first":2})`), each list
 * index as it is. A retry may select the first call's fields under other aliases; its fields
 * are the first's where their named paths are the same (see `StoredOutputs.names`).
 */

/** JSON with each object's keys sorted, at any depth: the same arguments, the same text. */
const stableJson = configure({ deterministic: true, bigint: true });

/** One step of an answer's path: a response key under its parent's type, or a list index. */
export interface PathStep {
  key: string | number;
  /** The object type the response key is a field of (graphql-js' `info.path.typename`). */
  typename?: string;
}

/** What of the operation the named path reads. */
export interface NamedPathSource {
  schema: GraphQLSchema;
  operation: OperationDefinitionNode;
  fragments: Readonly<Record<string, FragmentDefinitionNode>>;
  variables: Readonly<Record<string, unknown>>;
}

/**
 * The named steps of `path` (see above), from the operation's root; undefined where a step is
 * not found (a type the schema does not hold, a response key no selection gives). `onField`
 * is told each step's field and the object type it is a field of (each member that selects
 * it, under a union or interface graphql-jit tells no `typename` of), as they are found.
 */
export function namedSteps(
  graphql: GraphqlModule,
  source: NamedPathSource,
  path: readonly PathStep[],
  onField?: (index: number, type: GraphQLObjectType, name: string) => void,
  memberAt?: (index: number) => string | undefined,
): string[] | undefined {
  const { schema, fragments, variables } = source;
  // The operation as the parent of its root fields.
  let nodes: readonly FieldNode[] = [
    { selectionSet: source.operation.selectionSet } as unknown as FieldNode,
  ];
  const steps: string[] = [];
  // The type a step without its `typename` is a field of (graphql-jit tells none): the root
  // type, then each field's own type, where it is an object type (not a union's member).
  let told: unknown = schema.getRootType(source.operation.operation);
  for (const [index, { key, typename }] of path.entries()) {
    if (typeof key === 'number') {
      steps.push(String(key));
      continue;
    }
    const type = typename === undefined ? told : schema.getType(typename);
    // No `typename` under a union or interface (graphql-jit): the member the parent value was
    // answered as, where it is known (`memberAt`: adversary 89); else each member that
    // selects the response key, where all of them name the same field with the same arguments.
    const member = type && graphql.isAbstractType(type) ? memberAt?.(index) : undefined;
    const answered = member === undefined ? undefined : schema.getType(member);
    const types =
      type && graphql.isAbstractType(type) && typename === undefined
        ? answered && graphql.isObjectType(answered) && schema.isSubType(type, answered)
          ? [answered]
          : schema.getPossibleTypes(type)
        : [type];
    let found: { step: string; nodes: FieldNode[]; next: unknown } | undefined;
    // Members that name the response key as different fields: no one named step, but each
    // member's field is told (`onField`: an app's field of any of them is one there).
    let differ = false;
    for (const each of types) {
      if (!each || !graphql.isObjectType(each)) return undefined;
      const selection = { nodes, fragments, variables };
      for (const [name, fieldNodes] of selectedFields(graphql, schema, each, selection)) {
        const matching = fieldNodes.filter((node) => (node.alias?.value ?? name) === key);
        if (matching.length === 0) continue;
        const definition = each.getFields()[name];
        const step = name + argumentsOf(graphql, definition, matching[0], variables);
        const next = definition && graphql.getNamedType(definition.type);
        onField?.(index, each, name);
        if (found && (found.step !== step || found.next !== next)) differ = true;
        found ??= { step, nodes: [], next };
        found.nodes.push(...matching);
      }
    }
    if (!found || differ) return undefined;
    steps.push(found.step);
    told = found.next;
    nodes = found.nodes;
  }
  return steps;
}

/** A field's arguments as stable JSON (keys sorted), or nothing when it is given none. */
export function argumentsOf(
  graphql: GraphqlModule,
  definition: Parameters<GraphqlModule['getArgumentValues']>[0] | undefined,
  node: FieldNode,
  variables: Readonly<Record<string, unknown>>,
): string {
  if (!definition || definition.args.length === 0) return '';
  try {
    const values = graphql.getArgumentValues(definition, node, variables);
    return Object.keys(values).length === 0 ? '' : `(${stableJson(values) ?? ''})`;
  } catch {
    return '';
  }
}

/**
 * The named steps of the field GraphQL is resolving (see `namedSteps`). `own`: the object
 * type the field is a field of, where the caller knows it (the wrapper put on that type's
 * field): its step is named by it where the driver tells no `typename` (graphql-jit), so a
 * field of a union's member is named by that member's selection, not by all members' (which
 * give up where they select one response key as different fields: adversary 82).
 */
export function namedStepsOf(
  graphql: GraphqlModule,
  info: GraphQLResolveInfo,
  own?: string,
  onField?: (index: number, type: GraphQLObjectType, name: string) => void,
  memberOf?: (place: readonly (string | number)[]) => string | undefined,
): string[] | undefined {
  const path: PathStep[] = [];
  for (let at: GraphQLResolveInfo['path'] | undefined = info.path; at; at = at.prev) {
    path.unshift({ key: at.key, typename: at.typename });
  }
  const last = path[path.length - 1];
  if (own !== undefined && last && last.typename === undefined)
    path[path.length - 1] = { ...last, typename: own };
  const { schema, operation, fragments, variableValues: variables } = info;
  // The member of the value a step is a field of: the value at the steps before it.
  const memberAt =
    memberOf && ((index: number) => memberOf(path.slice(0, index).map(({ key }) => key)));
  return namedSteps(graphql, { schema, operation, fragments, variables }, path, onField, memberAt);
}
