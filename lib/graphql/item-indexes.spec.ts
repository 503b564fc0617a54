import * as graphql from 'graphql';
import { indexItems, itemIndexes } from './item-indexes.js';
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
  const card = { last4: '4242' };
  const bank = { iban: 'DE' };
  const nested = { iban: 'FR' };
  it.each<{
    name: string;
    field: string;
    value: unknown;
    item: object;
    list: string;
    expected: (number[] | undefined)[];
  }>([
    {
      name: 'an item of a list of members',
      field: 'payees',
      value: [card, bank],
      item: bank,
      list: 'payees',
      expected: [[1]],
    },
    {
      name: 'under an object, a list of lists: from the list field',
      field: 'box',
      value: { payees: [[card], [bank, nested]] },
      item: nested,
      list: 'payees',
      expected: [[1, 1]],
    },
    {
      name: 'a single member: no index',
      field: 'one',
      value: card,
      item: card,
      list: 'one',
      expected: [[]],
    },
    {
      name: 'one object twice in a list: each place in the order GraphQL completes them',
      field: 'payees',
      value: [card, bank, card],
      item: card,
      list: 'payees',
      expected: [[0], [2]],
    },
    {
      name: 'the same object under one field of two parents: cannot be told',
      field: 'boxes',
      value: [{ payees: [[card]] }, { payees: [[bank, card]] }],
      item: card,
      list: 'payees',
      expected: [undefined],
    },
  ])('$name', ({ field, value, item, list, expected }) => {
    const context = {};
    indexItems(graphql, schema, context, order.getFields()[field].type, value, field);
    for (const each of expected) {
      expect(itemIndexes(context, item, list, ['createOrder', list])).toEqual(each);
    }
    // Another operation's context: its own marks.
    expect(itemIndexes({}, item, list, ['createOrder', list])).toEqual([]);
  });

  it('the same objects in two lists: each list its own places', () => {
    const context = {};
    const fields = order.getFields();
    indexItems(graphql, schema, context, fields.payees.type, [card, bank, card], 'payees');
    indexItems(graphql, schema, context, fields.recent.type, [bank, card], 'recent');
    expect(itemIndexes(context, card, 'recent', ['o', 'recent'])).toEqual([1]);
    expect(itemIndexes(context, bank, 'recent', ['o', 'recent'])).toEqual([0]);
    expect(itemIndexes(context, card, 'payees', ['o', 'payees'])).toEqual([0]);
    expect(itemIndexes(context, card, 'payees', ['o', 'payees'])).toEqual([2]);
    // The same list under another alias: counted at its own path.
    expect(itemIndexes(context, card, 'payees', ['o', 'again'])).toEqual([0]);
  });

  it('a list of a type met first alone: its items noted too', () => {
    const context = {};
    const items = [{ last4: '1' }, { iban: '2' }];
    indexItems(graphql, schema, context, order.getFields().one.type, items[0], 'one');
    indexItems(graphql, schema, context, order.getFields().payees.type, items, 'payees');
    expect(itemIndexes(context, items[1], 'payees', ['payees'])).toEqual([1]);
  });

  it('reads no field that cannot hold a list of members', () => {
    const box = {
      payees: [],
      get name(): string {
        throw new Error('read');
      },
    };
    expect(() =>
      indexItems(graphql, schema, {}, order.getFields().box.type, box, 'box'),
    ).not.toThrow();
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
