import {
  type FieldNode,
  type GraphQLObjectType,
  type GraphQLOutputType,
  type GraphQLResolveInfo,
} from 'graphql';

type Path = GraphQLResolveInfo['path'];

/**
 * What graphql-js tells a union's or an interface's `resolveType()` of the field whose value
 * it is asked about, beyond the operation's own (schema, fragments, root value, operation,
 * variables): the field's `info` as `buildResolveInfo` builds it for the field's resolver.
 * The library tells a member ahead of graphql-js (wire-value.ts `memberAhead`); told with the
 * mutation's `info` instead, a `resolveType()` that reads `info.returnType` or `info.fieldName`
 * told another member than graphql-js then answered, and that member was stored (adversary
 * 116: a replay answered `data: null`).
 */
export interface FieldAt {
  readonly fieldName: string;
  readonly fieldNodes: readonly FieldNode[];
  /** The field's type, whole (a list's, a non-null's), as graphql-js gives it. */
  readonly returnType: GraphQLOutputType;
  readonly parentType: GraphQLObjectType;
  /**
   * The field's response path. A list's items share it: graphql-js adds an item's index to the
   * path it completes under, not to the `info` it gives `resolveType()`.
   */
  readonly path: Path;
  /** The path of the value itself: the field's, with the indexes of the items it is in. */
  readonly valuePath: Path;
}

/** Where the field a resolver answers stands: its own `info`'s. */
export function rootAt(info: GraphQLResolveInfo): FieldAt {
  const { fieldName, fieldNodes, returnType, parentType, path } = info;
  return { fieldName, fieldNodes, returnType, parentType, path, valuePath: path };
}

/** Where the item at `index` of the list at `at` stands: the list field's, at its index. */
export function itemAt(at: FieldAt | undefined, index: number): FieldAt | undefined {
  return at && { ...at, valuePath: { prev: at.valuePath, key: index, typename: undefined } };
}

/**
 * Where the field `fieldName` of `parentType` stands, under the field at `parent`, answered
 * at the response key `key`: its nodes are those of that key only, as graphql-js collects
 * them (a field selected under two aliases is two fields to it).
 */
export function fieldAt(
  parent: FieldAt | undefined,
  parentType: GraphQLObjectType,
  fieldName: string,
  returnType: GraphQLOutputType,
  nodes: readonly FieldNode[],
  key: string,
): FieldAt {
  const path = { prev: parent?.valuePath, key, typename: parentType.name };
  return {
    fieldName,
    fieldNodes: nodes.filter((node) => (node.alias?.value ?? node.name.value) === key),
    returnType,
    parentType,
    path,
    valuePath: path,
  };
}

/** The `info` graphql-js gives `resolveType()` at `at`: the operation's, with the field's. */
export function memberInfo(info: GraphQLResolveInfo, at: FieldAt | undefined): GraphQLResolveInfo {
  if (!at) return info;
  const { fieldName, fieldNodes, returnType, parentType, path } = at;
  return { ...info, fieldName, fieldNodes, returnType, parentType, path };
}
