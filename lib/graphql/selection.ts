import {
  type FieldNode,
  type FragmentDefinitionNode,
  type GraphQLObjectType,
  type GraphQLResolveInfo,
  type GraphQLSchema,
  type NamedTypeNode,
  type SelectionSetNode,
} from 'graphql';
import { type GraphqlModule } from './graphql-module.js';

/**
 * What the operation selects of a field's value: the field's nodes (one per alias and
 * repetition, as GraphQL hands them to its resolver), and what reading their selection sets
 * needs (the operation's fragments and variables, for `@include`/`@skip`).
 *
 * A stored answer holds what its selection reads, not its whole type: GraphQL itself reads
 * no more, and a type's other fields may link back (a cycle), load (a lazy relation) or be
 * large.
 */
export interface Selection {
  nodes: readonly FieldNode[];
  fragments: Readonly<Record<string, FragmentDefinitionNode>>;
  variables: Readonly<Record<string, unknown>>;
}

/** The selection of the field GraphQL is resolving (its `info`). */
export function selectionOf(info: GraphQLResolveInfo): Selection {
  return { nodes: info.fieldNodes, fragments: info.fragments, variables: info.variableValues };
}

/**
 * The fields of an object of `type` that the selection sets of `nodes` select, by field name
 * (not by alias: a replay's default resolver reads the value by name), each with all the nodes
 * that select it under any alias, so that their sub-selections are read as one. Collected as
 * graphql-js's `collectFields` does: fragments and inline fragments whose type condition the
 * type meets (itself, or an interface or union it is in), each named fragment once, and
 * `@skip`/`@include` read with the operation's variables. GraphQL's own fields (`__typename`)
 * need no value: left out, unless `own` (a value made as GraphQL completes it, which writes
 * them; found through fragments alike).
 */
export function selectedFields(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  type: GraphQLObjectType,
  selection: Selection,
  own = false,
): Map<string, FieldNode[]> {
  const fields = new Map<string, FieldNode[]>();
  for (const node of collectedNodes(graphql, schema, type, selection)) {
    const name = node.name.value;
    if (name.startsWith('__') && !own) continue;
    const nodes = fields.get(name);
    if (nodes) nodes.push(node);
    else fields.set(name, [node]);
  }
  return fields;
}

/**
 * The field nodes the selection sets of `nodes` select for an object of `type`, in the order
 * graphql-js's `collectFields` meets them: fragments and inline fragments whose type
 * condition the type meets inlined in place (each named fragment once), `@skip`/`@include`
 * read with the operation's variables. `type` undefined (an abstract type whose member is not
 * told): every fragment is taken.
 */
export function collectedNodes(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  type: GraphQLObjectType | undefined,
  selection: Selection,
): FieldNode[] {
  const found: FieldNode[] = [];
  const visited = new Set<string>();
  const meetsType = (condition: NamedTypeNode | undefined) =>
    type === undefined || meets(graphql, schema, type, condition);
  const collect = (set: SelectionSetNode): void => {
    for (const node of set.selections) {
      if (!included(graphql, node, selection.variables)) continue;
      if (node.kind === graphql.Kind.FIELD) {
        found.push(node);
      } else if (node.kind === graphql.Kind.INLINE_FRAGMENT) {
        if (meetsType(node.typeCondition)) collect(node.selectionSet);
      } else {
        const name = node.name.value;
        if (visited.has(name)) continue;
        visited.add(name);
        const fragment = selection.fragments[name];
        if (fragment && meetsType(fragment.typeCondition)) collect(fragment.selectionSet);
      }
    }
  };
  for (const node of selection.nodes) if (node.selectionSet) collect(node.selectionSet);
  return found;
}

/**
 * The response keys and names of the fields an alias `node` selects under it, in the order
 * GraphQL completes them (see `collectedNodes`): what `aliasErrorChoice` picks by (adversary
 * 96: a field in a fragment, or one `@include(if: false)` leaves out).
 */
export function subfieldKeys(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  type: GraphQLObjectType | undefined,
  node: FieldNode,
  selection: Omit<Selection, 'nodes'>,
): string[] {
  return collectedNodes(graphql, schema, type, { ...selection, nodes: [node] }).flatMap((field) => [
    field.name.value,
    ...(field.alias ? [field.alias.value] : []),
  ]);
}

/** Whether `@skip`/`@include` leave the node in, with the operation's variables. */
function included(
  graphql: GraphqlModule,
  node: Parameters<GraphqlModule['getDirectiveValues']>[1],
  variables: Readonly<Record<string, unknown>>,
): boolean {
  if (graphql.getDirectiveValues(graphql.GraphQLSkipDirective, node, variables)?.if === true) {
    return false;
  }
  return graphql.getDirectiveValues(graphql.GraphQLIncludeDirective, node, variables)?.if !== false;
}

/** Whether an object of `type` meets a fragment's type condition (none: always). */
function meets(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  type: GraphQLObjectType,
  condition: NamedTypeNode | undefined,
): boolean {
  if (!condition) return true;
  // Without the schema (a value stored outside an operation), by the type's own name.
  if (!schema) return condition.name.value === type.name;
  const conditional = graphql.typeFromAST(schema, condition);
  if (conditional === type) return true;
  return graphql.isAbstractType(conditional) && schema.isSubType(conditional, type);
}
