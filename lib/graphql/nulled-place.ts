import { type FieldNode, type GraphQLObjectType, type GraphQLOutputType } from 'graphql';
import { type GraphqlModule } from './graphql-module.js';
import { type OutputSelection } from './output-names.js';
import { selectedFields } from './selection.js';

/**
 * Where graphql-js put the null for an error at `path` (response keys and indexes from the
 * operation's root): the length of the path's prefix at the nearest nullable place at or
 * above the error's field (0: the whole `data`), as it carries a non-null place's null up.
 * Read from the operation (`selection`: its root selection as `nodes`, `root` its root type),
 * each step's field found by its response key through fragments; at a union's or an
 * interface's place, by the member `memberAt` tells (by the path's key). Undefined where it
 * cannot be told (a step not found, a member not told).
 */
export function nulledPlace(
  graphql: GraphqlModule,
  selection: OutputSelection,
  root: GraphQLObjectType,
  path: readonly (string | number)[],
  memberAt: (key: string) => string | undefined = () => undefined,
): number | undefined {
  const { schema, fragments, variables } = selection;
  let nodes: readonly FieldNode[] = selection.nodes;
  let object: GraphQLObjectType | undefined = root;
  let type: GraphQLOutputType | undefined;
  let nulled = 0;
  for (let i = 0; i < path.length; i++) {
    const step = path[i];
    if (typeof step === 'number') {
      const list = type && graphql.isNonNullType(type) ? type.ofType : type;
      if (!list || !graphql.isListType(list)) return undefined;
      type = list.ofType;
    } else {
      if (!object) {
        const named = type && graphql.getNamedType(type);
        const member =
          named && graphql.isAbstractType(named) ? memberAt(path.slice(0, i).join('.')) : undefined;
        const told = member === undefined ? named : schema.getType(member);
        if (!told || !graphql.isObjectType(told)) return undefined;
        object = told;
      }
      const chosen = selectedFields(graphql, schema, object, { nodes, fragments, variables });
      let found: { name: string; nodes: FieldNode[] } | undefined;
      for (const [name, fieldNodes] of chosen) {
        const same = fieldNodes.filter((node) => (node.alias?.value ?? name) === step);
        if (same.length > 0) found = { name, nodes: same };
      }
      const definition = found && object.getFields()[found.name];
      if (!found || !definition) return undefined;
      type = definition.type;
      nodes = found.nodes;
      object = undefined;
    }
    if (!graphql.isNonNullType(type)) nulled = i + 1;
  }
  return nulled;
}
