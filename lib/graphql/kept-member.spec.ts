import * as graphql from 'graphql';
import { keepsOwnMember } from './kept-member.js';
import { type ResolverKind } from './resolver-kind.js';

describe('keepsOwnMember', () => {
  const { GraphQLID, GraphQLInt, GraphQLString, GraphQLList, GraphQLNonNull } = graphql;
  const Address = new graphql.GraphQLObjectType({
    name: 'Address',
    fields: { street: { type: GraphQLString } },
  });
  it.each<{
    name: string;
    resolution: ResolverKind;
    type: graphql.GraphQLOutputType;
    kept: { has: boolean; value?: unknown };
    wires: unknown[];
    expected: boolean;
  }>([
    {
      name: 'a numeric key written as ID: the raw number kept',
      resolution: 'property',
      type: new GraphQLNonNull(GraphQLID),
      kept: { has: true, value: 7 },
      wires: ['7'],
      expected: true,
    },
    {
      name: 'not kept: the answer',
      resolution: 'property',
      type: GraphQLID,
      kept: { has: false },
      wires: ['7'],
      expected: false,
    },
    {
      name: 'kept another value than the answer wrote: the answer',
      resolution: 'property',
      type: GraphQLInt,
      kept: { has: true, value: 8 },
      wires: [7],
      expected: false,
    },
    {
      name: 'a null in the answer (maybe an error): the answer',
      resolution: 'property',
      type: GraphQLString,
      kept: { has: true, value: 'x' },
      wires: [null],
      expected: false,
    },
    {
      name: 'a value its scalar refuses: the answer',
      resolution: 'property',
      type: GraphQLInt,
      kept: { has: true, value: 'many' },
      wires: [3],
      expected: false,
    },
    {
      name: 'a list of leaves written the same: kept',
      resolution: 'property',
      type: new GraphQLList(GraphQLID),
      kept: { has: true, value: [1, 2] },
      wires: [['1', '2']],
      expected: true,
    },
    {
      name: 'a list of another length: the answer',
      resolution: 'property',
      type: new GraphQLList(GraphQLID),
      kept: { has: true, value: [1, 2] },
      wires: [['1']],
      expected: false,
    },
    {
      name: 'two aliases, one written otherwise: the answer',
      resolution: 'property',
      type: GraphQLID,
      kept: { has: true, value: 7 },
      wires: ['7', '8'],
      expected: false,
    },
    {
      name: 'behind middleware: the middleware input kept (the output answered at its place)',
      resolution: 'middleware',
      type: GraphQLString,
      kept: { has: true, value: 'ada@example.com' },
      wires: ['a***@example.com'],
      expected: true,
    },
    {
      name: 'behind middleware, not kept: the answer',
      resolution: 'middleware',
      type: GraphQLString,
      kept: { has: false },
      wires: ['a***@example.com'],
      expected: false,
    },
    {
      name: 'an object: the answer (its own parents, members, errors)',
      resolution: 'property',
      type: Address,
      kept: { has: true, value: { street: 'Main' } },
      wires: [{ street: 'Main' }],
      expected: false,
    },
    {
      name: 'the app resolves it: not decided here',
      resolution: 'app',
      type: GraphQLString,
      kept: { has: true, value: 'x' },
      wires: ['x'],
      expected: false,
    },
  ])('$name', ({ resolution, type, kept, wires, expected }) => {
    expect(keepsOwnMember(graphql, resolution, type, kept, wires)).toBe(expected);
  });
});
