import {
  GraphQLInt,
  GraphQLList,
  GraphQLObjectType,
  type GraphQLResolveInfo,
  parse,
  type FieldNode,
  type OperationDefinitionNode,
  responsePathAsArray,
} from 'graphql';
import { type FieldAt, fieldAt, itemAt, memberInfo, rootAt } from './member-info.js';

const Owner = new GraphQLObjectType({ name: 'Owner', fields: { id: { type: GraphQLInt } } });
const Mutation = new GraphQLObjectType({ name: 'Mutation', fields: { id: { type: GraphQLInt } } });
const operation = parse('mutation { addOwner { pet { id } a: pets { id } b: pets { id } } }')
  .definitions[0] as OperationDefinitionNode;
const addOwner = operation.selectionSet.selections[0] as FieldNode;
const [pet, a, b] = addOwner.selectionSet!.selections as FieldNode[];
const mutationInfo = {
  fieldName: 'addOwner',
  fieldNodes: [addOwner],
  returnType: new GraphQLList(Owner),
  parentType: Mutation,
  path: { prev: undefined, key: 'addOwner', typename: 'Mutation' },
  operation,
  variableValues: { v: 1 },
} as unknown as GraphQLResolveInfo;

describe('memberInfo: the info a resolveType() is told, as graphql-js builds it', () => {
  const root = rootAt(mutationInfo);
  const cases: [string, FieldAt | undefined, string, (string | number)[], FieldNode[]][] = [
    ['no place: the call’s own', undefined, 'addOwner', ['addOwner'], [addOwner]],
    ['the mutation’s field itself', root, 'addOwner', ['addOwner'], [addOwner]],
    [
      'a field of its object',
      fieldAt(root, Owner, 'pet', GraphQLInt, [pet], 'pet'),
      'pet',
      ['addOwner', 'pet'],
      [pet],
    ],
    [
      'a field of its list’s second item: the index in the path',
      fieldAt(itemAt(root, 1), Owner, 'pet', GraphQLInt, [pet], 'pet'),
      'pet',
      ['addOwner', 1, 'pet'],
      [pet],
    ],
    [
      'an item of a list field: the list field’s path, as graphql-js gives it',
      itemAt(fieldAt(root, Owner, 'pets', GraphQLInt, [a, b], 'a'), 3),
      'pets',
      ['addOwner', 'a'],
      [a],
    ],
    [
      'a later alias: its own key, its own nodes',
      fieldAt(root, Owner, 'pets', GraphQLInt, [a, b], 'b'),
      'pets',
      ['addOwner', 'b'],
      [b],
    ],
  ];
  it.each(cases)('%s', (_case, at, fieldName, path, nodes) => {
    const info = memberInfo(mutationInfo, at);
    expect(info.fieldName).toBe(fieldName);
    expect(responsePathAsArray(info.path)).toEqual(path);
    expect(info.fieldNodes).toEqual(nodes);
    // The operation's own, whatever the field.
    expect(info.operation).toBe(operation);
    expect(info.variableValues).toEqual({ v: 1 });
    expect(Object.keys(info)).not.toContain('valuePath');
  });

  it('a field under an item names its parent type in the path, an index none', () => {
    const at = fieldAt(itemAt(root, 0), Owner, 'pet', GraphQLInt, [pet], 'pet');
    expect(at.parentType).toBe(Owner);
    expect(at.path.typename).toBe('Owner');
    expect(at.path.prev).toEqual({ prev: root.path, key: 0, typename: undefined });
  });
});
