import * as graphql from 'graphql';
import { nulledPlace } from './nulled-place.js';

describe('nulledPlace', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Card { last4: String! }
    type Bank { iban: String }
    union Method = Card | Bank
    type Line { sku: String, price: Float! }
    type Order {
      id: Int!
      note: String
      lines: [Line!]!
      methods: [Method]
      shop: Shop!
    }
    type Shop { name: String! }
    type Mutation { createOrder: Order, placeOrder: Order! }
  `);
  const root = schema.getMutationType()!;
  const selectionOf = (text: string) => {
    const document = graphql.parse(text);
    const operation = document.definitions[0] as graphql.OperationDefinitionNode;
    const top = { kind: graphql.Kind.FIELD, selectionSet: operation.selectionSet };
    const fragments: Record<string, graphql.FragmentDefinitionNode> = {};
    for (const each of document.definitions) {
      if (each.kind === graphql.Kind.FRAGMENT_DEFINITION) fragments[each.name.value] = each;
    }
    return { schema, nodes: [top as graphql.FieldNode], fragments, variables: {} };
  };
  const text =
    'mutation { o: createOrder { note lines { price } shop { ...S } methods { ... on Card { last4 } } } ' +
    'placeOrder { note shop { name } } } fragment S on Shop { name }';
  it.each<{
    name: string;
    path: (string | number)[];
    members?: Record<string, string>;
    expected: number | undefined;
  }>([
    { name: 'a nullable field: itself', path: ['o', 'note'], expected: 2 },
    {
      name: 'a non-null field in non-null items of a non-null list: the nullable mutation',
      path: ['o', 'lines', 1, 'price'],
      expected: 1,
    },
    { name: 'through a named fragment', path: ['o', 'shop', 'name'], expected: 1 },
    { name: 'up to the whole data', path: ['placeOrder', 'shop', 'name'], expected: 0 },
    {
      name: "a member's field: by the member told",
      path: ['o', 'methods', 0, 'last4'],
      members: { 'o.methods.0': 'Card' },
      expected: 3,
    },
    {
      name: 'a member not told: cannot be told',
      path: ['o', 'methods', 0, 'last4'],
      expected: undefined,
    },
    { name: 'a key not selected: cannot be told', path: ['o', 'id'], expected: undefined },
  ])('$name', ({ path, members = {}, expected }) => {
    expect(nulledPlace(graphql, selectionOf(text), root, path, (key) => members[key])).toBe(
      expected,
    );
  });
});
