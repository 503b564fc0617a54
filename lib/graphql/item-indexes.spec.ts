import * as graphql from 'graphql';
import { indexItems, indexItemsUnread, itemIndexes, walkAsTold } from './item-indexes.js';
import { memberPath } from './replayed-member.js';

describe('indexItems', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Card { last4: String }
    type Bank { iban: String }
    union Payee = Card | Bank
    type Box { payees: [[Payee]], name: String }
    type Order { payees: [Payee!]!, recent: [Payee], box: Box, boxes: [Box], one: Payee }
    type Mutation { createOrder: Order }
  `);
  const order = schema.getType('Order') as graphql.GraphQLObjectType;
  /** The operation's selection of `field` under `createOrder` (`text`, its own selection). */
  const selecting = (field: string, text: string, fragments = '') => {
    const document = graphql.parse(`mutation { createOrder { ${text} } } ${fragments}`);
    const operation = document.definitions[0] as graphql.OperationDefinitionNode;
    const root = operation.selectionSet.selections[0] as graphql.FieldNode;
    const nodes = (root.selectionSet!.selections as graphql.FieldNode[]).filter(
      (node) => node.name.value === field,
    );
    const byName: Record<string, graphql.FragmentDefinitionNode> = {};
    for (const each of document.definitions) {
      if (each.kind === graphql.Kind.FRAGMENT_DEFINITION) byName[each.name.value] = each;
    }
    return { schema, nodes, fragments: byName, variables: {} };
  };
  const all: Record<string, string> = {
    payees: 'payees { __typename }',
    recent: 'recent { __typename }',
    one: 'one { __typename }',
    box: 'box { name payees { __typename } }',
    boxes: 'boxes { payees { __typename } }',
  };
  const selected = (field: string) => selecting(field, all[field]);
  const card = { last4: '4242' };
  const bank = { iban: 'DE' };
  const nested = { iban: 'FR' };
  const root = ['createOrder'];
  it.each<{
    name: string;
    field: string;
    value: unknown;
    item: object;
    /** The list field's path, as graphql-js gives an item's `resolveType()`. */
    list: (string | number)[];
    listed?: boolean;
    expected: (number[] | undefined)[];
  }>([
    {
      name: 'an item of a list of members',
      field: 'payees',
      value: [card, bank],
      item: bank,
      list: ['createOrder', 'payees'],
      expected: [[1]],
    },
    {
      name: 'under an object, a list of lists: from the list field',
      field: 'box',
      value: { payees: [[card], [bank, nested]] },
      item: nested,
      list: ['createOrder', 'box', 'payees'],
      expected: [[1, 1]],
    },
    {
      name: 'a single member: no index',
      field: 'one',
      value: card,
      item: card,
      list: ['createOrder', 'one'],
      listed: false,
      expected: [[]],
    },
    {
      name: 'one object twice in a list: each place in the order GraphQL completes them',
      field: 'payees',
      value: [card, bank, card],
      item: card,
      list: ['createOrder', 'payees'],
      expected: [[0], [2]],
    },
    {
      name: 'the same object under one field of two parents: each parent its own list',
      field: 'boxes',
      value: [{ payees: [[card]] }, { payees: [[bank, card]] }],
      item: card,
      list: ['createOrder', 'boxes', 1, 'payees'],
      expected: [[0, 1]],
    },
    {
      name: 'an item of a list at no place noted: none',
      field: 'payees',
      value: [card],
      item: bank,
      list: ['createOrder', 'payees'],
      expected: [undefined],
    },
  ])('$name', ({ field, value, item, list, listed = true, expected }) => {
    const context = {};
    const type = order.getFields()[field].type;
    indexItems(graphql, selected(field), context, type, value, [...root, field]);
    for (const each of expected) {
      expect(itemIndexes(context, item, list, listed)).toEqual(each);
    }
    // Another operation's context: its own marks.
    expect(itemIndexes({}, item, list, listed)).toEqual(listed ? undefined : []);
  });

  it('the same objects under two aliases, each its own selection: each alias its own list', () => {
    const context = {};
    const type = order.getFields().payees.type;
    const text = 'a: payees { ... on Card { last4 } } b: payees { ... on Bank { iban } }';
    const selection = selecting('payees', text);
    // The middleware runs once per alias, each a new array of the same objects (a filter).
    indexItems(graphql, selection, context, type, [card, bank], [...root, 'a']);
    indexItems(graphql, selection, context, type, [bank, card], [...root, 'b']);
    expect(itemIndexes(context, card, [...root, 'a'], true)).toEqual([0]);
    expect(itemIndexes(context, card, [...root, 'b'], true)).toEqual([1]);
  });

  it('a list under an object selected under two aliases: each its own path', () => {
    const context = {};
    const type = order.getFields().box.type;
    const text = 'box { p: payees { __typename } q: payees { __typename } }';
    indexItems(graphql, selecting('box', text), context, type, { payees: [[card]] }, [
      ...root,
      'box',
    ]);
    expect(itemIndexes(context, card, [...root, 'box', 'p'], true)).toEqual([0, 0]);
    expect(itemIndexes(context, card, [...root, 'box', 'q'], true)).toEqual([0, 0]);
  });

  it('reads no field that cannot hold a list of members', () => {
    const box = {
      payees: [],
      get name(): string {
        throw new Error('read');
      },
    };
    const type = order.getFields().box.type;
    expect(() => indexItems(graphql, selected('box'), {}, type, box, root)).not.toThrow();
  });

  it('reads no field the operation does not select (a getter that loads)', () => {
    const box = {
      get payees(): unknown[] {
        throw new Error('loaded');
      },
    };
    const type = order.getFields().box.type;
    const selection = selecting('box', 'box { name }');
    expect(() => indexItems(graphql, selection, {}, type, box, root)).not.toThrow();
  });

  it('reads no getter, selected or not: its items marked where GraphQL resolves it', () => {
    let loads = 0;
    const box = {
      name: 'b',
      get payees(): unknown[] {
        loads++;
        return [[{ ...card }]];
      },
    };
    const type = order.getFields().box.type;
    const context = {};
    indexItems(graphql, selected('box'), context, type, box, [...root, 'box']);
    expect(loads).toBe(0);
    // GraphQL reads it once, and its field's wrapper marks what it gave.
    const loaded = box.payees;
    const boxType = schema.getType('Box') as graphql.GraphQLObjectType;
    const inner = selecting('box', all.box).nodes[0].selectionSet!
      .selections as graphql.FieldNode[];
    const payees = { ...selected('box'), nodes: inner.filter((n) => n.name.value === 'payees') };
    const at = [...root, 'box', 'payees'];
    indexItemsUnread(graphql, payees, context, boxType.getFields().payees.type, loaded, at);
    expect(loads).toBe(1);
    const item = (loaded[0] as object[])[0];
    expect(itemIndexes(context, item, at, true)).toEqual([0, 0]);
  });

  it('marks no field value the walk read (marked by the walk, once)', () => {
    const box = { payees: [[card]] };
    const type = order.getFields().box.type;
    const context = {};
    indexItems(graphql, selected('box'), context, type, box, [...root, 'box']);
    const boxType = schema.getType('Box') as graphql.GraphQLObjectType;
    const inner = selecting('box', all.box).nodes[0].selectionSet!
      .selections as graphql.FieldNode[];
    const payees = { ...selected('box'), nodes: inner.filter((n) => n.name.value === 'payees') };
    const at = [...root, 'box', 'payees'];
    const other = { last4: '0000' };
    indexItemsUnread(graphql, payees, context, boxType.getFields().payees.type, [[other]], at);
    expect(itemIndexes(context, card, at, true)).toEqual([0, 0]);
    expect(itemIndexes(context, other, at, true)).toBeUndefined();
  });

  it('walks a field selected through a named fragment, `@skip` read', () => {
    const box = { payees: [[card, bank]] };
    const type = order.getFields().box.type;
    const fragment = 'fragment P on Box { payees { __typename } }';
    const at = [...root, 'box'];
    const context = {};
    indexItems(graphql, selecting('box', 'box { ...P }', fragment), context, type, box, at);
    expect(itemIndexes(context, bank, [...at, 'payees'], true)).toEqual([0, 1]);
    const skipped = {};
    const text = 'box { ...P @skip(if: true) }';
    indexItems(graphql, selecting('box', text, fragment), skipped, type, box, at);
    expect(itemIndexes(skipped, bank, [...at, 'payees'], true)).toBeUndefined();
  });
});

describe('indexItems, Promises and members told', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Card { last4: String, history: [Payee] }
    type Bank { iban: String, history: [Payee] }
    union Payee = Card | Bank
    type Wallet { payees: [Payee] }
    type Mutation { createWallet: Wallet }
  `);
  const wallet = schema.getType('Wallet') as graphql.GraphQLObjectType;
  const payee = schema.getType('Payee') as graphql.GraphQLUnionType;
  const type = wallet.getFields().payees.type;
  const at = ['createWallet', 'payees'];
  const selection = (text: string) => {
    const document = graphql.parse(`mutation { createWallet { ${text} } }`);
    const operation = document.definitions[0] as graphql.OperationDefinitionNode;
    const root = operation.selectionSet.selections[0] as graphql.FieldNode;
    const nodes = root.selectionSet!.selections as graphql.FieldNode[];
    return { schema, nodes, fragments: {}, variables: {} };
  };
  const settled = () => new Promise((resolve) => setImmediate(resolve));
  afterEach(() => {
    delete (payee as { resolveType?: unknown }).resolveType;
  });

  it.each<{ name: string; value: (card: object) => unknown }>([
    { name: 'the list a Promise', value: (card) => Promise.resolve([card]) },
    { name: 'each item a Promise', value: (card) => [Promise.resolve(card)] },
  ])('$name: placed by what it settles to', async ({ value }) => {
    const card = { last4: '4242' };
    const context = {};
    indexItems(graphql, selection('payees { __typename }'), context, type, value(card), at);
    expect(itemIndexes(context, card, at, true)).toBeUndefined();
    await settled();
    expect(itemIndexes(context, card, at, true)).toEqual([0]);
  });

  it("walks an item, once its resolveType() told it, for its own member's selection only", () => {
    payee.resolveType = () => 'Card';
    const inner = { iban: 'DE' };
    let bankHistoryReads = 0;
    const card = { history: [inner] };
    const bank = {
      get history(): unknown[] {
        bankHistoryReads++;
        return [inner];
      },
    };
    const text = 'payees { ... on Card { history { __typename } } ... on Bank { iban } }';
    const context = {};
    indexItems(graphql, selection(text), context, type, [bank, card], at);
    // Not yet told: nothing under the items read.
    expect(itemIndexes(context, inner, [...at, 1, 'history'], true)).toBeUndefined();
    walkAsTold(context, bank, [...at, 0], 'Bank');
    walkAsTold(context, card, [...at, 1], Promise.resolve(payee.getTypes()[0]));
    expect(bankHistoryReads).toBe(0);
    return settled().then(() => {
      expect(itemIndexes(context, inner, [...at, 1, 'history'], true)).toEqual([0]);
    });
  });
});

describe('memberPath', () => {
  it.each<{
    name: string;
    given: (string | number)[];
    indexes: number[] | undefined;
    expected: (string | number)[] | undefined;
  }>([
    {
      name: "graphql-js: the list field's path, the item's indexes added",
      given: ['createOrder', 'methods'],
      indexes: [1],
      expected: ['createOrder', 'methods', 1],
    },
    {
      name: "graphql-jit: the item's own path, as it is",
      given: ['createOrder', 'grid', 0, 1],
      indexes: [0, 1],
      expected: ['createOrder', 'grid', 0, 1],
    },
    {
      name: 'a single member: its own path',
      given: ['createOrder', 'one'],
      indexes: [],
      expected: ['createOrder', 'one'],
    },
    {
      name: 'a place that cannot be told: none',
      given: ['createOrder', 'methods'],
      indexes: undefined,
      expected: undefined,
    },
  ])('$name', ({ given, indexes, expected }) => {
    expect(memberPath(given, () => indexes)).toEqual(expected);
  });
});
