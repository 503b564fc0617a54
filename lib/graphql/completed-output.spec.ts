import * as graphql from 'graphql';
import { completedOutput, readList } from './completed-output.js';
import { noteResolverKind } from './resolver-kind.js';

describe('completedOutput', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Card { label: String, last4: String }
    type Bank { iban: String }
    union Method = Card | Bank
    type Address { street: String, city: String }
    type Box { name: String!, inner: Box }
    type Order {
      label: String!
      tags: [String]
      shipping: Address
      methods: [Method]
      boxes: [Box!]
    }
    type Mutation { createOrder: Order }
  `);
  const order = schema.getType('Order') as graphql.GraphQLObjectType;
  const nodesOf = (text: string, fragments = '') => {
    const document = graphql.parse(`mutation { createOrder { ${text} } } ${fragments}`);
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
    fragments?: string;
    /** `Address.street` behind middleware of its own, the results its wrapper saw by key. */
    middleware?: boolean;
    results?: Record<string, unknown>;
    expected: { value: unknown; errorsAt?: string[] } | undefined;
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
    {
      name: 'a generator (one-shot): cannot be told',
      field: 'tags',
      selection: 'tags',
      value: (function* () {
        yield 'a';
      })(),
      expected: undefined,
    },
    {
      name: 'a Set (read again as GraphQL read it)',
      field: 'tags',
      selection: 'tags',
      value: new Set(['a', 'b']),
      expected: { value: ['a', 'b'] },
    },
    {
      name: 'not iterable as a list: cannot be told',
      field: 'tags',
      selection: 'tags',
      value: { length: 1, 0: 'a' },
      expected: undefined,
    },
    {
      name: 'a named fragment, its __typename too',
      field: 'shipping',
      selection: 'shipping { ...A }',
      fragments: 'fragment A on Address { street __typename t: __typename }',
      value: { street: 'Main', city: 'Paris' },
      expected: { value: { street: 'Main', __typename: 'Address', t: 'Address' } },
    },
    {
      name: "a named fragment on another member: not this member's",
      field: 'methods',
      selection: 'methods { ...C ... on Bank { iban __typename } }',
      fragments: 'fragment C on Card { label __typename }',
      value: [{ label: 'V' }, { iban: 'DE' }],
      members: { '0': 'Card', '1': 'Bank' },
      expected: {
        value: [
          { label: 'V', __typename: 'Card' },
          { iban: 'DE', __typename: 'Bank' },
        ],
      },
    },
    {
      name: 'a scalar that cannot be serialized at a nullable field: null there',
      field: 'shipping',
      selection: 'shipping { street city }',
      value: { street: {}, city: 'Paris' },
      expected: { value: { street: null, city: 'Paris' }, errorsAt: ['street'] },
    },
    {
      name: 'a field behind middleware of its own, its result not seen: cannot be told',
      field: 'shipping',
      selection: 'shipping { street }',
      value: { street: 'Main' },
      middleware: true,
      expected: undefined,
    },
    {
      name: 'a field behind middleware of its own: what its middleware gave, never its input',
      field: 'shipping',
      selection: 'shipping { street city }',
      value: { street: 'Main', city: 'Paris' },
      middleware: true,
      results: { street: 'M***' },
      expected: { value: { street: 'M***', city: 'Paris' } },
    },
    {
      name: 'a named fragment skipped: not selected',
      field: 'shipping',
      selection: 'shipping { city ...A @skip(if: true) }',
      fragments: 'fragment A on Address { street }',
      value: { street: 'Main', city: 'Paris' },
      expected: { value: { city: 'Paris' } },
    },
  ])('$name', async (each) => {
    const { field, selection, value, members = {}, fragments = '', expected } = each;
    const { middleware = false, results = {} } = each;
    const document = graphql.parse(`query { ping } ${fragments}`);
    const byName: Record<string, graphql.FragmentDefinitionNode> = {};
    for (const each of document.definitions) {
      if (each.kind === graphql.Kind.FRAGMENT_DEFINITION) byName[each.name.value] = each;
    }
    const nodes = nodesOf(selection, fragments).filter((node) => node.name.value === field);
    const street = (schema.getType('Address') as graphql.GraphQLObjectType).getFields().street;
    street.resolve = (source: { street?: unknown }) => source.street;
    noteResolverKind(street.resolve, middleware ? 'middleware' : 'property');
    const made = completedOutput(
      graphql,
      { schema, nodes, fragments: byName, variables: {} },
      order.getFields()[field].type,
      value,
      (key) => members[key],
      (key) => (key in results ? { value: results[key] } : undefined),
    );
    if (middleware) noteResolverKind(street.resolve!, 'property');
    expect(made).toEqual(expected);
    // Sync where no Promise is under it.
    expect(made instanceof Promise).toBe(false);
  });

  it.each<{
    name: string;
    value: unknown;
    field?: string;
    selection?: string;
    expected: { value: unknown; errorsAt?: string[] } | undefined;
  }>([
    {
      name: 'a Promise under it: awaited',
      value: { street: Promise.resolve('Main'), city: 'Paris' },
      expected: { value: { street: 'Main', city: 'Paris' } },
    },
    {
      name: 'a Promise of an object with a Promise',
      value: Promise.resolve({ street: Promise.resolve('Main') }),
      expected: { value: { street: 'Main', city: null } },
    },
    {
      // GraphQL answered an error there and null at that nullable field (adversary 84).
      name: 'a Promise that fails at a nullable field: null there, its key noted',
      value: { street: Promise.reject(new Error('no')), city: 'Paris' },
      expected: { value: { street: null, city: 'Paris' }, errorsAt: ['street'] },
    },
    {
      name: 'a failure at a non-null field: null at the nearest nullable place above',
      field: 'boxes',
      selection: 'boxes { name inner { name } }',
      value: [{ name: 'A', inner: { name: Promise.reject(new Error('no')) } }, { name: 'B' }],
      expected: {
        value: [
          { name: 'A', inner: null },
          { name: 'B', inner: null },
        ],
        errorsAt: ['0.inner.name'],
      },
    },
    {
      // GraphQL nulled the field itself: not made (its own null is stored, with the error).
      name: 'a failure that reaches the field itself: cannot be told',
      field: 'label',
      selection: 'label',
      value: Promise.reject(new Error('no')),
      expected: undefined,
    },
  ])('$name', async ({ value, expected, field = 'shipping', selection }) => {
    const text = selection ?? 'shipping { street city }';
    const nodes = nodesOf(text).filter((n) => n.name.value === field);
    const made = completedOutput(
      graphql,
      { schema, nodes, fragments: {}, variables: {} },
      order.getFields()[field].type,
      value,
      () => undefined,
    );
    expect(made instanceof Promise).toBe(true);
    expect(await made).toEqual(expected);
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
