import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-06 fourth): an object whose type has a field of the app's, selected or not, keeps its unselected
 * own data (and its selected objects' beyond their selection) in `PARENT`
 * (lib/graphql/parent-keeping.ts, `hasAppField` in resolved-fields.ts, told once per type): a
 * retry that adds `emailDomain` runs it on the first call's data, as the docs promise. Left
 * out, largest first, only where it takes the stored answer past `maxResponseBytes`
 * (lib/graphql/parent-data-within.ts).
 *
 * Adversary 90 (graphql): the first call selects `customer { name }`; its retry (the same
 * operation with one more field, a client whose query grew between releases, or a retry built
 * from another screen's fragment) also selects `emailDomain`, a `@ResolveField()` of
 * `Customer` that reads its parent's `contact.email`. The docs say such a field "is not
 * refused: it runs again on a replay". It runs over a parent that kept none of its own data
 * (no field of the app's was selected at the first call): the replay answers
 * `emailDomain: "undefined"`, no error, a value the first call's data never had (the contact's
 * domain is `example.org`); a resolver that reads deeper (`customer.lines.reduce(...)`) throws
 * a TypeError, and the replay's `data` is null.
 *
 * User code:
 *   @ObjectType() class Customer { @Field() name; @Field(() => Contact) contact; ... }
 *   @ResolveField(() => String) emailDomain(@Parent() c: Customer) {
 *     return String(c.contact?.email?.split('@')[1]);
 *   }
 *   first:  mutation { createOrder { id customer { name } } }
 *   retry:  mutation { createOrder { id customer { name emailDomain } } }
 *
 * Code path: lib/graphql/wire-value.ts `walkObject`: the own data of an object's unselected
 * fields is kept only `if (byClass || resolutions.includes('app'))`, i.e. when the FIRST call
 * selected a field of the app's; lib/graphql/resolved-fields.ts ("Its parent keeps its
 * unselected own data ...; a retry that selects it is never refused") runs the app's field
 * on the replay over a parent rebuilt from the selected fields only.
 *
 * Docs (docs/guides/graphql.md, "A retry that selects other fields"): "A retry that selects a
 * field the first call did not gets, for that field, an error, never a made-up null ... A
 * field that has a `@ResolveField()` of its own (or a Mercurius loader) is not refused: it
 * runs again on a replay, as it does for every replay."
 *
 * Severity: medium (a retry with a grown selection gets a made-up value with no error, or a
 * resolver's TypeError; the mutation's work is done once).
 *
 * Fails now (unskip the it.skip and run this file): the retry answers
 * `customer: { name: "Ada", emailDomain: "undefined" }`.
 * Control (passes): the first call selecting `emailDomain` too: the retry answers
 * `"example.org"`.
 *
 * Suggested fix: keep the own data of an object whose type has a field the app resolves
 * (selected or not: a retry may select it), as for one whose selected field is the app's; or,
 * where it was not kept, refuse the app's field on the replay with `field_not_stored`, as an
 * unselected property is.
 */
let pool: Pool;

@ObjectType()
class Contact {
  @Field()
  phone!: string;

  @Field()
  email!: string;
}

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  price!: number;
}

@ObjectType()
class Customer {
  @Field()
  name!: string;

  @Field(() => Contact)
  contact!: Contact;

  @Field(() => [Line])
  lines!: Line[];
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Customer)
  customer!: Customer;
}

@Resolver(() => Customer)
class CustomerFields {
  // A read, as the docs advise for field resolvers: computed from the parent's own data.
  @ResolveField(() => String)
  emailDomain(@Parent() customer: Customer): string {
    return String(customer.contact?.email?.split('@')[1]);
  }

  // The same, over a list: a total from the lines' prices.
  @ResolveField(() => Int)
  total(@Parent() customer: Customer): number {
    return customer.lines.reduce((sum, line) => sum + line.price, 0);
  }
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
    const contact = { phone: '555', email: 'ada@example.org' };
    const lines = [
      { id: 1, price: 5 },
      { id: 2, price: 7 },
    ];
    return { id: rows[0].id, customer: { name: 'Ada', contact, lines } };
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
  providers: [OrdersResolver, CustomerFields],
})
class OrdersModule {}

describe('adversary 90: a retry selects a @ResolveField() the first call did not', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv90_gql_retry_adds_rf', {
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

  const retry = 'mutation { createOrder { id customer { name emailDomain } } }';

  const retried = async (key: string, first: string) => {
    const firstAnswer = await post(key, first);
    expect(firstAnswer.body.errors).toBeUndefined();
    const id = firstAnswer.body.data.createOrder.id as number;
    const again = await post(key, retry);
    expect(again.body).toEqual({
      data: { createOrder: { id, customer: { name: 'Ada', emailDomain: 'example.org' } } },
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: the first call selected emailDomain too: the retry answers its value', async () => {
    await retried('adv90-retry-rf-same', retry);
  });

  it('the first call did not select emailDomain: the retry answers its value', async () => {
    await retried('adv90-retry-rf-added', 'mutation { createOrder { id customer { name } } }');
  });
});
