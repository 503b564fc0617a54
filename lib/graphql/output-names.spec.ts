import * as graphql from 'graphql';
import { type FieldNode, type OperationDefinitionNode } from 'graphql';
import { storedSubkey } from './middleware-outputs.js';
import { joinKey, namesInside } from './output-names.js';

describe('namesInside', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Address { street: String, city(short: Boolean): String }
    type Card { label: String }
    type Bank { label: String, iban: String }
    union Method = Card | Bank
    type Order { shipping: Address, methods: [Method] }
    type Mutation { createOrder: Order }
  `);
  const fieldOf = (query: string): readonly FieldNode[] => {
    const operation = graphql.parse(query).definitions[0] as OperationDefinitionNode;
    const order = operation.selectionSet.selections[0] as FieldNode;
    return [order.selectionSet!.selections[0] as FieldNode];
  };
  const order = schema.getType('Order') as graphql.GraphQLObjectType;
  it.each<{ name: string; query: string; value: unknown; expected: Record<string, string> }>([
    {
      name: 'an alias by its field name and arguments',
      query: 'mutation { createOrder { shipping { line1: street c: city(short: true) } } }',
      value: { line1: 'Main St', c: 'X' },
      expected: { line1: 'street', c: 'city({"short":true})' },
    },
    {
      name: "a list of union members, by the member told or the value's __typename",
      query:
        'mutation { createOrder { methods { ... on Card { t: label } ... on Bank { t: label iban } } } }',
      value: [{ t: 'C' }, { t: 'B', iban: 'I', __typename: 'Bank' }, null],
      expected: { '0.t': '0.label', '1.t': '1.label', '1.iban': '1.iban' },
    },
    {
      name: 'a response key the value does not hold: left out',
      query: 'mutation { createOrder { shipping { street } } }',
      value: {},
      expected: {},
    },
  ])('$name', ({ query, value, expected }) => {
    const nodes = fieldOf(query);
    const field = order.getFields()[nodes[0].name.value];
    const selection = { schema, nodes, fragments: {}, variables: {} };
    const memberAt = (key: string) => (key === '0' ? 'Card' : undefined);
    expect(namesInside(graphql, selection, field.type, value, memberAt)).toEqual(expected);
  });

  it.each([
    ['', 'a', 'a'],
    ['a', 0, 'a.0'],
  ])('joinKey(%p, %p): %p', (key, step, expected) => {
    expect(joinKey(key, step)).toBe(expected);
  });
});

describe('storedSubkey', () => {
  // The first call: `shipping { line1: street b: city }`, stored under key `k`, named `n`.
  const names = {
    byName: { 'n.street': 'k.line1', 'n.city': 'k.b' },
    byKey: { 'k.line1': 'n.street', 'k.b': 'n.city' },
  };
  const stored = { line1: 'Main St', b: 'Paris' };
  it.each<{ name: string; named?: string; step: string; asked: string[]; expected?: string }>([
    {
      name: 'by name, under the first alias',
      named: 'n',
      step: 'street',
      asked: ['street'],
      expected: 'line1',
    },
    { name: 'aliases swapped', named: 'n', step: 'city', asked: ['line1'], expected: 'b' },
    { name: 'another field under a stored key', named: 'n', step: 'zip', asked: ['b'] },
    { name: 'not selected by the first call', named: 'n', step: 'zip', asked: ['zip'] },
    { name: 'no named key: by response key', step: 'x', asked: ['b'], expected: 'b' },
  ])('$name', ({ named, step, asked, expected }) => {
    expect(storedSubkey(stored, 'k', named, step, asked, names)).toBe(expected);
  });

  it('no stored names (an output stored before them): by response key only', () => {
    expect(storedSubkey(stored, 'k', 'n', 'street', ['line1'], undefined)).toBe('line1');
    expect(storedSubkey(stored, 'k', 'n', 'street', ['street'], undefined)).toBeUndefined();
  });
});
