import * as graphql from 'graphql';
import { type OperationDefinitionNode } from 'graphql';
import { namedSteps, namedStepsOf, type PathStep } from './named-path.js';

describe('namedSteps', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Order { id: Int, tags(first: Int, where: Where): [String], items: [Item], thing: Thing }
    union Thing = Item
    input Where { colour: String, size: Int }
    type Item { tags: [String] }
    type Mutation { createOrder(key: String): Order }
  `);
  const named = (query: string, path: PathStep[], variables: Record<string, unknown> = {}) => {
    const document = graphql.parse(query);
    const operation = document.definitions.find(
      (each): each is OperationDefinitionNode => each.kind === graphql.Kind.OPERATION_DEFINITION,
    )!;
    const fragments = Object.fromEntries(
      document.definitions.flatMap((each) =>
        each.kind === graphql.Kind.FRAGMENT_DEFINITION ? [[each.name.value, each]] : [],
      ),
    );
    return namedSteps(graphql, { schema, operation, fragments, variables }, path);
  };
  const M = 'Mutation';
  it.each<{ name: string; query: string; path: PathStep[]; expected: string[] | undefined }>([
    {
      name: 'a field by its name',
      query: 'mutation { createOrder { tags } }',
      path: [
        { key: 'createOrder', typename: M },
        { key: 'tags', typename: 'Order' },
      ],
      expected: ['createOrder', 'tags'],
    },
    {
      name: 'an alias by its field name and arguments',
      query: 'mutation { a: createOrder(key: "k") { colours: tags(first: 2) } }',
      path: [
        { key: 'a', typename: M },
        { key: 'colours', typename: 'Order' },
      ],
      expected: ['createOrder({"key":"k"})', 'tags({"first":2})'],
    },
    {
      name: 'through a fragment, list indexes as they are',
      query: 'mutation { createOrder { list: items { ...F } } } fragment F on Item { t: tags }',
      path: [
        { key: 'createOrder', typename: M },
        { key: 'list', typename: 'Order' },
        { key: 3 },
        { key: 't', typename: 'Item' },
      ],
      expected: ['createOrder', 'items', '3', 'tags'],
    },
    {
      name: 'a response key no selection gives',
      query: 'mutation { createOrder { tags } }',
      path: [
        { key: 'createOrder', typename: M },
        { key: 'other', typename: 'Order' },
      ],
      expected: undefined,
    },
    {
      name: 'steps without their types (graphql-jit): by the root and each field’s type',
      query: 'mutation { createOrder { list: items { t: tags } } }',
      path: [{ key: 'createOrder' }, { key: 'list' }, { key: 0 }, { key: 't' }],
      expected: ['createOrder', 'items', '0', 'tags'],
    },
    {
      name: 'a step without its type under a union: the members that select it (graphql-jit)',
      query: 'mutation { createOrder { thing { ... on Item { t: tags } } } }',
      path: [{ key: 'createOrder' }, { key: 'thing' }, { key: 't' }],
      expected: ['createOrder', 'thing', 'tags'],
    },
    {
      name: 'a step without its type under a union that no member selects: not found',
      query: 'mutation { createOrder { thing { ... on Item { tags } } } }',
      path: [{ key: 'createOrder' }, { key: 'thing' }, { key: 'other' }],
      expected: undefined,
    },
  ])('$name', ({ query, path, expected }) => {
    expect(named(query, path)).toEqual(expected);
  });

  it('input objects by their values, each key sorted', () => {
    const query = 'mutation { createOrder { tags(where: { size: 2, colour: "red" }, first: 1) } }';
    const path = [
      { key: 'createOrder', typename: M },
      { key: 'tags', typename: 'Order' },
    ];
    expect(named(query, path)).toEqual([
      'createOrder',
      'tags({"first":1,"where":{"colour":"red","size":2}})',
    ]);
  });

  it('arguments from variables are their values', () => {
    const query = 'mutation ($n: Int) { createOrder { tags(first: $n) } }';
    const path = [
      { key: 'createOrder', typename: M },
      { key: 'tags', typename: 'Order' },
    ];
    expect(named(query, path, { n: 2 })).toEqual(['createOrder', 'tags({"first":2})']);
  });

  it.each<{ name: string; path: PathStep[]; expected: string[] }>([
    {
      name: 'each step its type and field, without typenames (graphql-jit)',
      path: [{ key: 'createOrder' }, { key: 'list' }, { key: 0 }, { key: 'tags' }],
      expected: ['0 Mutation.createOrder', '1 Order.items', '3 Item.tags'],
    },
    {
      name: 'under a union without typenames: each member that selects it',
      path: [{ key: 'createOrder' }, { key: 'thing' }, { key: 'tags' }],
      expected: ['0 Mutation.createOrder', '1 Order.thing', '2 Item.tags'],
    },
  ])('tells each field found: $name', ({ path, expected }) => {
    const query =
      'mutation { createOrder { list: items { tags } thing { ... on Item { tags } } } }';
    const document = graphql.parse(query);
    const operation = document.definitions[0] as OperationDefinitionNode;
    const told: string[] = [];
    namedSteps(
      graphql,
      { schema, operation, fragments: {}, variables: {} },
      path,
      (i, type, name) => told.push(`${i} ${type.name}.${name}`),
    );
    expect(told).toEqual(expected);
  });
});

describe('namedSteps under a union without typenames (graphql-jit)', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Line { label: String }
    type Quote { quoteLines: [Line], lines: [Line] }
    type Order { lines: [Line] }
    union Placed = Quote | Order
    type Mutation { place: Placed }
  `);
  const query =
    'mutation { place { ... on Quote { items: quoteLines { label } } ' +
    '... on Order { items: lines { label } } } }';
  const operation = graphql.parse(query).definitions[0] as OperationDefinitionNode;
  const path: PathStep[] = [{ key: 'place' }, { key: 'items' }, { key: 0 }, { key: 'label' }];
  it.each<{ name: string; member?: string; steps: string[] | undefined; told: string[] }>([
    {
      name: 'the member unknown, one key two fields: no named step, each field told',
      steps: undefined,
      told: ['0 Mutation.place', '1 Quote.quoteLines', '1 Order.lines'],
    },
    {
      name: 'the member answered a Quote: its own field alone',
      member: 'Quote',
      steps: ['place', 'quoteLines', '0', 'label'],
      told: ['0 Mutation.place', '1 Quote.quoteLines', '3 Line.label'],
    },
    {
      name: 'the member answered an Order: its own field alone',
      member: 'Order',
      steps: ['place', 'lines', '0', 'label'],
      told: ['0 Mutation.place', '1 Order.lines', '3 Line.label'],
    },
    {
      name: 'a member the union does not hold: each member, as unknown',
      member: 'Line',
      steps: undefined,
      told: ['0 Mutation.place', '1 Quote.quoteLines', '1 Order.lines'],
    },
  ])('$name', ({ member, steps, told }) => {
    const seen: string[] = [];
    const found = namedSteps(
      graphql,
      { schema, operation, fragments: {}, variables: {} },
      path,
      (i, type, name) => seen.push(`${i} ${type.name}.${name}`),
      // The value at `place` (the first step) was answered as `member`.
      (index) => (index === 1 ? member : undefined),
    );
    expect(found).toEqual(steps);
    expect(seen).toEqual(told);
  });
});

describe('namedStepsOf', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Card { label: String, note: String }
    type Bank { label: String, note: String }
    union Method = Card | Bank
    type Order { methods: [Method] }
    type Mutation { createOrder: Order }
  `);
  const query =
    'mutation { createOrder { methods { ... on Card { x: label } ... on Bank { x: note } } } }';
  const operation = graphql.parse(query).definitions[0] as OperationDefinitionNode;
  // graphql-jit's path: no `typename` at any step.
  const info = {
    schema,
    operation,
    fragments: {},
    variableValues: {},
    path: ['createOrder', 'methods', 0, 'x'].reduce<graphql.GraphQLResolveInfo['path'] | undefined>(
      (prev, key) => ({ prev, key, typename: undefined }),
      undefined,
    ),
  } as unknown as graphql.GraphQLResolveInfo;
  it.each<{ name: string; own?: string; expected: string[] | undefined }>([
    {
      name: 'a member field, its own type known: that member’s field',
      own: 'Card',
      expected: ['createOrder', 'methods', '0', 'label'],
    },
    { name: 'the other member', own: 'Bank', expected: ['createOrder', 'methods', '0', 'note'] },
    { name: 'not known: the members disagree, none', expected: undefined },
  ])('$name', ({ own, expected }) => {
    expect(namedStepsOf(graphql, info, own)).toEqual(expected);
  });
});
