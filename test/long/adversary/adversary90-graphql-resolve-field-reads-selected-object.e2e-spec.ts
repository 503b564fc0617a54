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
 * Fixed (session of 2026-12-06 fourth): a selected object field of a parent whose type has a field of the app's is walked
 * keeping its own data beyond its selection, at any depth (lib/graphql/parent-keeping.ts
 * `parentKeeping`, `children: 'data'`; wire-value.ts `PARENT`): the replay's `contact` is
 * rebuilt from its stored `{ phone }` with its kept `email` beside it, each `lines` item with
 * its `price`, so the `@ResolveField()` reads what the first call's read.
 *
 * Adversary 90 (graphql): a `@ResolveField()` that reads its parent's data one level down
 * (`customer.contact.email`) answers something else on a replay as soon as the client also
 * selects that object field with fewer fields (`contact { phone }`). No field middleware, no
 * error: the mutation's own value, Apollo on Express, the docs' "computed label" advice.
 *
 * User code:
 *   @ObjectType() class Contact { @Field() phone; @Field() email }
 *   @ObjectType() class Customer { @Field() name; @Field(() => Contact) contact }
 *   @Resolver(() => Customer) class CustomerFields {
 *     @ResolveField(() => String) emailDomain(@Parent() c: Customer) {
 *       return String(c.contact?.email?.split('@')[1]);
 *     }
 *   }
 *   @Mutation(() => Order) @Idempotent() createOrder() { INSERT ...; return { id, customer } }
 *   query: mutation { createOrder { id customer { emailDomain contact { phone } } } }
 *
 * Code path: lib/graphql/wire-value.ts `walkObject`: an object one of whose selected fields is
 * the app's (`resolutions.includes('app')`) keeps `ownData(source, fields, selected)`, the own
 * data of its UNSELECTED fields only; a selected object field (`contact`) is walked along its
 * own selection (`{ phone }`), and `contact`'s own walk keeps nothing more (none of ITS
 * selected fields is the app's). The replay's rebuilt parent holds `contact: { phone }`, so
 * the `@ResolveField()` reads `email` as undefined.
 *
 * Docs (docs/guides/graphql.md, "What the resolvers under it read, as they first read it"):
 * "a `@ResolveField()` reads its parent, so each object also keeps ... what the stored fields
 * would not give back ... A replay's resolvers get the same values as the first call's, and
 * the answer is the same bytes. An object one of whose selected fields has a `@ResolveField()`
 * keeps its unselected fields' own data too ..., since that resolver may read any of its
 * parent's."
 *
 * Severity: high (a replay answers a different value, with no error, on every retry: a label,
 * a price or a relation computed from a nested object of the parent; the client selecting a
 * field of that object is all it takes).
 *
 * The same over a list, the commonest shape: `@ResolveField(() => Int) total(@Parent() c) {
 * return c.lines.reduce((sum, line) => sum + line.price, 0) }` with `lines { id }` selected.
 *
 * Fails now (unskip the it.skip tests and run this file): the first answer has
 * `emailDomain: "example.org"`, the replay `emailDomain: "undefined"` (same for the middleware
 * output's parent: `customer` behind `@Field({ middleware })` answers the same); the first
 * answer has `total: 12`, the replay `data: null` with `Int cannot represent non-integer
 * value: NaN` at `createOrder.customer.total` (every retry, the order's work done once).
 * Control (passes): the same resolvers with `contact` (`lines`) not selected: it is then an
 * unselected field, kept whole, and the replay answers `"example.org"` (`12`).
 *
 * Suggested fix: in `walkObject`, where a selected field is the app's, keep the parent's own
 * data of its selected object fields too (as typed JSON, like the unselected ones: the raw
 * `contact` as the resolver read it), and rebuild the replay's parent over it, the selected
 * fields' wire form answering the selection (a kept object beside the stored one, as
 * `kept-member.ts` does for leaves); likewise `parentData` for middleware outputs.
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

describe('adversary 90: a @ResolveField() reads a field of its parent the client selected with fewer fields', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv90_gql_rf_selected_obj', {
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

  const replayOf = async (key: string, query: string) => {
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.errors).toBeUndefined();
    expect(firstAnswer.body.data.createOrder.customer).toMatchObject(
      query.includes('total') ? { total: 12 } : { emailDomain: 'example.org' },
    );
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: contact not selected: the replay answers the first answer', async () => {
    await replayOf(
      'adv90-rf-unselected',
      'mutation { createOrder { id customer { emailDomain } } }',
    );
  });

  it('contact selected as { phone }: the replay answers the first answer', async () => {
    await replayOf(
      'adv90-rf-selected',
      'mutation { createOrder { id customer { emailDomain contact { phone } } } }',
    );
  });

  it('control: lines not selected: the replay answers the first answer', async () => {
    await replayOf(
      'adv90-rf-lines-unselected',
      'mutation { createOrder { id customer { total } } }',
    );
  });

  it('lines selected as { id }: the replay answers the first answer', async () => {
    await replayOf(
      'adv90-rf-lines-selected',
      'mutation { createOrder { id customer { total lines { id } } } }',
    );
  });
});
