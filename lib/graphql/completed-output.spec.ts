import * as graphql from 'graphql';
import { completedOutput, readList } from './completed-output.js';

describe('completedOutput', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Card { label: String, last4: String }
    type Bank { iban: String }
    union Method = Card | Bank
    type Address { street: String, city: String }
    type Order { label: String!, tags: [String], shipping: Address, methods: [Method] }
    type Mutation { createOrder: Order }
  `);
  const order = schema.getType('Order') as graphql.GraphQLObjectType;
  const nodesOf = (text: string) => {
    const document = graphql.parse(`mutation { createOrder { ${text} } }`);
    const operation = document.definitions[0] as graphql.OperationDefinitionNode;
    const root = operation.selectionSet.selections[0] as graphql.FieldNode;
    return root.selectionSet!.selections as graphql.FieldNode[];
  };
  it.each<{
    name: string;
    field: string;
    selection: string;
    value: unknown;
    members?: Record<string, string>;
    expected: { value: unknown } | undefined;
  }>([
    { name: 'a scalar', field: 'label', selection: 'label', value: 'A', expected: { value: 'A' } },
    {
      name: 'a list of scalars',
      field: 'tags',
      selection: 'tags',
      value: ['a', null],
      expected: { value: ['a', null] },
    },
    {
      name: 'an object, by the response keys selected',
      field: 'shipping',
      selection: 'shipping { s: street __typename }',
      value: { street: 'Main', city: 'Paris' },
      expected: { value: { s: 'Main', __typename: 'Address' } },
    },
    {
      name: 'a union list, each member noted',
      field: 'methods',
      selection: 'methods { ... on Card { label } ... on Bank { iban } }',
      value: [{ label: 'V', last4: '1' }, { iban: 'DE' }],
      members: { '0': 'Card', '1': 'Bank' },
      expected: { value: [{ label: 'V' }, { iban: 'DE' }] },
    },
    {
      name: 'a member not noted: cannot be told',
      field: 'methods',
      selection: 'methods { ... on Card { label } }',
      value: [{ label: 'V' }],
      expected: undefined,
    },
    {
      name: 'a one-shot iterable (spent by GraphQL): cannot be told',
      field: 'tags',
      selection: 'tags',
      value: ['a'].values(),
      expected: undefined,
    },
  ])('$name', ({ field, selection, value, members = {}, expected }) => {
    const nodes = nodesOf(selection).filter((node) => node.name.value === field);
    const made = completedOutput(
      graphql,
      { schema, nodes, fragments: {}, variables: {} },
      order.getFields()[field].type,
      value,
      (key) => members[key],
    );
    expect(made).toEqual(expected);
  });
});

describe('readList', () => {
  const list = new graphql.GraphQLList(graphql.GraphQLString);
  function* tags() {
    yield 'GIFT';
    yield 'EXPRESS';
  }
  const array = ['A'];
  it.each<{ name: string; type: graphql.GraphQLOutputType; value: unknown; expected: unknown }>([
    { name: 'a generator: read once', type: list, value: tags(), expected: ['GIFT', 'EXPRESS'] },
    {
      name: 'under non-null',
      type: new graphql.GraphQLNonNull(list),
      value: ['x'].values(),
      expected: ['x'],
    },
    { name: 'an array: itself', type: list, value: array, expected: array },
    { name: 'not a list type: as it is', type: graphql.GraphQLString, value: 'ab', expected: 'ab' },
    { name: 'null', type: list, value: null, expected: null },
  ])('$name', ({ type, value, expected }) => {
    const read = readList(graphql, type, value);
    expect(read).toEqual(expected);
    if (Array.isArray(value)) expect(read).toBe(value);
  });
});
