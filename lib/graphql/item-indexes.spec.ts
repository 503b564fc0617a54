import * as graphql from 'graphql';
import { indexItems, itemIndexes } from './item-indexes.js';

describe('indexItems', () => {
  const schema = graphql.buildSchema(`
    type Query { ping: Int }
    type Card { last4: String }
    type Bank { iban: String }
    union Payee = Card | Bank
    type Box { payees: [[Payee]], name: String }
    type Order { payees: [Payee!]!, box: Box, one: Payee }
    type Mutation { createOrder: Order }
  `);
  const order = schema.getType('Order') as graphql.GraphQLObjectType;
  const card = { last4: '4242' };
  const bank = { iban: 'DE' };
  const nested = { iban: 'FR' };
  it.each<{ name: string; field: string; value: unknown; item: object; expected: number[] }>([
    {
      name: 'an item of a list of members',
      field: 'payees',
      value: [card, bank],
      item: bank,
      expected: [1],
    },
    {
      name: 'under an object, a list of lists: from the list field',
      field: 'box',
      value: { payees: [[card], [bank, nested]] },
      item: nested,
      expected: [1, 1],
    },
    { name: 'a single member: no index', field: 'one', value: card, item: card, expected: [] },
  ])('$name', ({ field, value, item, expected }) => {
    const context = {};
    indexItems(graphql, schema, context, order.getFields()[field].type, value);
    expect(itemIndexes(context, item)).toEqual(expected);
    // Another operation's context: its own marks.
    expect(itemIndexes({}, item)).toEqual([]);
  });

  it('a list of a type met first alone: its items noted too', () => {
    const context = {};
    const items = [{ last4: '1' }, { iban: '2' }];
    indexItems(graphql, schema, context, order.getFields().one.type, items[0]);
    indexItems(graphql, schema, context, order.getFields().payees.type, items);
    expect(itemIndexes(context, items[1])).toEqual([1]);
  });

  it('reads no field that cannot hold a list of members', () => {
    const box = {
      payees: [],
      get name(): string {
        throw new Error('read');
      },
    };
    expect(() => indexItems(graphql, schema, {}, order.getFields().box.type, box)).not.toThrow();
  });
});
