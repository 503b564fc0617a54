import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  createUnionType,
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 83 (graphql): a union list behind field middleware, selected under two aliases
 * (each its own fragments), whose middleware gives a new array of the same objects (a
 * filter): no member of the list is noted at the first answer, and the retry of the very same
 * operation asks the app's `resolveType()` about the stored objects, which lack the data it
 * reads: `data: null`, "Cannot return null for non-nullable field Person.name." at
 * `createOrder.names.1.name` (the company told as a person).
 *
 * The app: `createOrder` (Nest's default non-null type) with `@Idempotent()` answers `Order {
 * id payees }`, `payees: [Payee]` behind Nest's field middleware `visible` (the payees this
 * caller may see: `value.filter((payee) => !payee.hidden)`); `Payee = Person | Company` told
 * apart as Nest's recipe does (`value.vat !== undefined ? Company : Person`). The client
 * selects `names: payees { ... on Person { name } ... on Company { legalName } }` and `people:
 * payees { ... on Person { name } }` (two blocks of one screen), and retries the same
 * operation.
 *
 * Why: the middleware runs once per alias, each a new array holding the same objects;
 * `indexItems` (lib/graphql/item-indexes.ts:76-83) keeps each object's places by the list
 * field's name (`payees`), for one list value: the second alias's list is another value, so
 * the places are dropped as "cannot be told apart" (`byField.set(field, null)`, :83) for both
 * aliases. graphql-js tells `resolveType()` the list field's path, `itemIndexes` answers
 * undefined (:139), `memberPath` gives no place and nothing is noted
 * (lib/graphql/replayed-member.ts:114); the replay's stored item has no member
 * (`outputValue`, lib/graphql/middleware-outputs.ts:364: `{ ...stored }`), and goes to the
 * app's `resolveType()`, which reads `vat`, never selected, never stored.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a union's or an interface's member as
 * the first answer's `resolveType()` told it"; "A union's or an interface's member in a list
 * is noted at each place of the item, the same object twice in a list or in two lists
 * included"; "one field under two aliases, each with its own selection, each its own output";
 * "(Nest's recipe tells a `Book` by its `title`), which a replay does not have".
 *
 * The same with one alias (the field name's other case of the same mark): one object in the
 * lists of two parents under the same field name (a bank, the contact of two payees:
 * `Person.contacts` and `Company.contacts`, both `[Payee]`), which the docs name ("the same
 * object ... in two lists included"): `place` drops its places (:83), nothing is noted, and the
 * replay answers each contact `{}`, silently (the bank told as a `Person`, its `legalName`
 * never asked).
 *
 * Controls (pass): the middleware gives the list it read (the same array to both aliases);
 * the filtered copy under one alias.
 *
 * Severity: high (a retry of a committed order answers `data: null`: its id and its payees
 * lost, the client cannot tell it was made).
 *
 * Fails now: `data: null`, "Cannot return null for non-nullable field Person.name." at
 * `createOrder.names.1.name`; with the bank in two lists, `contacts: [{}]` for both payees
 * where the first answer gave `[{ legalName: 'Bank plc' }]`.
 *
 * Suggested fix: key the places by the path of the list (each alias's own call, its own list
 * value; each parent's own list), not only by the field's name: `indexItems` is called per call, with `info.path`
 * at hand; `itemIndexes` can then find the places of that path's list. Or note the member at
 * the wrapper's own completion of each item (walk the completed list in `mark`) rather than
 * from graphql-js' list-field path.
 *
 * Fixed: `indexItems` (lib/graphql/item-indexes.ts) keeps each item's places by the path of
 * the list field in the answer (each alias's own call and list, each parent's own list, with
 * the indexes of the items above it), not by the field's name and list value; `itemIndexes`
 * finds them by the path graphql-js gives the item's `resolveType()`
 * (lib/graphql/replayed-member.ts).
 */
let pool: Pool;
let copies = true;

@ObjectType()
class Person {
  @Field()
  name!: string;

  @Field(() => [Payee])
  contacts: (Person | Company)[] = [];

  hidden?: boolean;
}

@ObjectType()
class Company {
  @Field()
  legalName!: string;

  @Field()
  vat!: string;

  @Field(() => [Payee])
  contacts: (Person | Company)[] = [];

  hidden?: boolean;
}

/** Told apart as Nest's recipe does: by data the member has. */
const Payee = createUnionType({
  name: 'Payee',
  types: () => [Person, Company] as const,
  resolveType: (value: Partial<Company>) => (value.vat !== undefined ? Company : Person),
});

/** Nest's field middleware: the payees this caller may see (a new array, the same objects). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as (Person | Company)[];
  return copies ? value.filter((payee) => !payee.hidden) : value;
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Payee], { middleware: [visible] })
  payees!: (Person | Company)[];
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const person = Object.assign(new Person(), { name: 'Ada' });
    const company = Object.assign(new Company(), { legalName: 'Acme Ltd', vat: 'GB123' });
    const secret = Object.assign(new Person(), { name: 'Mallory', hidden: true });
    // One bank, the contact of both payees (the same object in two lists).
    const bank = Object.assign(new Company(), { legalName: 'Bank plc', vat: 'GB999' });
    person.contacts = [bank];
    company.contacts = [bank];
    return { id: rows[0].id, payees: [person, secret, company] };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 83: a union list behind middleware selected under two aliases', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv83_gql_mw_union_two_aliases', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const QUERY = `mutation {
    createOrder {
      id
      names: payees { ... on Person { name } ... on Company { legalName } }
      people: payees { ... on Person { name } }
    }
  }`;

  const check = async (key: string) => {
    const first = await post(key, QUERY);
    expect(first.body).toEqual({
      data: {
        createOrder: {
          id: expect.any(Number),
          names: [{ name: 'Ada' }, { legalName: 'Acme Ltd' }],
          people: [{ name: 'Ada' }, {}],
        },
      },
    });
    const again = await post(key, QUERY);
    // Fails: data null, Cannot return null for non-nullable field Person.name (names.1.name).
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: the middleware gives the list it read, both aliases, the operation retried', async () => {
    copies = false;
    const first = await post('adv83-union-same', QUERY);
    expect(first.body.data.createOrder.names).toEqual([
      { name: 'Ada' },
      { name: 'Mallory' },
      { legalName: 'Acme Ltd' },
    ]);
    const again = await post('adv83-union-same', QUERY);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  });

  it('control: a filtered copy under one alias, the operation retried', async () => {
    copies = true;
    const query =
      'mutation { createOrder { id names: payees { ... on Person { name } ... on Company { legalName } } } }';
    const first = await post('adv83-union-one', query);
    expect(first.body.data.createOrder.names).toEqual([{ name: 'Ada' }, { legalName: 'Acme Ltd' }]);
    const again = await post('adv83-union-one', query);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  });

  it('one object in the lists of two payees, one alias: the retry answers the first answer', async () => {
    copies = true;
    const query = `mutation {
      createOrder {
        id
        payees {
          ... on Person { name contacts { ... on Company { legalName } } }
          ... on Company { legalName contacts { ... on Company { legalName } } }
        }
      }
    }`;
    const first = await post('adv83-union-contacts', query);
    const bank = { legalName: 'Bank plc' };
    expect(first.body.data.createOrder.payees).toEqual([
      { name: 'Ada', contacts: [bank] },
      { legalName: 'Acme Ltd', contacts: [bank] },
    ]);
    const again = await post('adv83-union-contacts', query);
    // Fails: each contact `{}`, the bank told as a Person by the app's resolveType.
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  });

  it('the middleware gives a filtered copy: the retry answers the first answer', async () => {
    copies = true;
    await check('adv83-union-filtered');
  });
});
