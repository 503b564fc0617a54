import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
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
 * Fixed (session of 2026-12-06 fourth): inside a replayed middleware output, a selected object field of a parent kept for
 * the app's resolvers whose kept data holds it is answered apart from the parent's property
 * (lib/graphql/apart-answers.ts; the wrapper `answerAliasReadsOf` puts on such fields in
 * lib/graphql/middleware-outputs.ts answers GraphQL the rebuilt object or its error again):
 * the property stays the kept raw `contact`, which `phoneLine` reads as the first call did.
 *
 * Adversary 90 (graphql): inside a field-middleware output (`Order.customer`), a
 * `@ResolveField()` of the output's type (`Customer.phoneLine`, from `customer.contact.phone`)
 * answers something else on a replay when a sibling object field it reads (`contact`) was
 * nulled at the first answer by an error under it (a missing non-null `email`, a contact
 * imported from an old system). The first answer: `phoneLine: "tel:555"`, `contact: null` with
 * its error. The replay: `phoneLine: "tel:undefined"`, `contact: null` with its error.
 *
 * User code:
 *   const visible: FieldMiddleware = async (_ctx, next) => ({ ...(await next()) });
 *   Contact { @Field() phone; @Field() email }   Customer { @Field() name;
 *   @Field(() => Contact, { nullable: true }) contact }   Order { @Field(() => Customer,
 *   { middleware: [visible] }) customer }
 *   @ResolveField(() => String) phoneLine(@Parent() c: Customer) { return `tel:${c.contact?.phone}` }
 *   query: mutation { createOrder { id customer { phoneLine contact { phone email } } } }
 *
 * Code path: lib/graphql/middleware-outputs.ts `outputValue`: the replay's rebuilt `Customer`
 * is `{ ...parentData(kept) }` with each selected field over it; `contact`'s stored null is
 * rebuilt as its error (`fieldErrorAgain`), and `value.contact = item` puts that Error where
 * the kept raw contact was (lib/graphql/kept-member.ts: "An object is always the answer's"),
 * so the app's resolver reads `Error.phone`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A `@ResolveField()` under a middleware
 * field of object type reads, on a replay, a parent rebuilt from the answer with the own data
 * it had at the first answer ... A replay's resolvers get the same values as the first
 * call's, and the answer is the same bytes"; "a field the first answer gave as null with its
 * error answers that error again where it was".
 *
 * Severity: medium (a replay answers a different value with no error of its own, on every
 * retry; only where an error nulled an object the resolver reads).
 *
 * Fails now (unskip the it.skip and run this file): the replay answers
 * `phoneLine: "tel:undefined"` (first answer: `"tel:555"`); `contact` and its error are the same.
 * Control (passes): the same operation on `billing`, the same type without middleware
 * (the mutation's own value): replayed as `"tel:555"`.
 *
 * Suggested fix: where the rebuilt value of a selected object field is an error (or an alias
 * read of errors) and the parent was kept for the app's resolvers, give those resolvers the
 * kept raw object (keep the selected object field's own data, as for an unselected one), and
 * answer the error from the field's own read (a wrapper, as `answerAliasReadsOf` does), not
 * from the parent's property the app's resolvers read.
 */
let pool: Pool;

/** Nest's field middleware: the customer as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const customer = (await next()) as Customer;
  return { ...customer };
};

@ObjectType()
class Contact {
  @Field()
  phone!: string;

  @Field()
  email!: string;
}

@ObjectType()
class Customer {
  @Field()
  name!: string;

  @Field(() => Contact, { nullable: true })
  contact!: Contact | null;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Customer, { middleware: [visible] })
  customer!: Customer;

  @Field(() => Customer)
  billing!: Customer;
}

@Resolver(() => Customer)
class CustomerFields {
  @ResolveField(() => String)
  phoneLine(@Parent() customer: Customer): string {
    return `tel:${customer.contact?.phone}`;
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
    // Imported from an old system: no email on file.
    const contact = { phone: '555', email: null } as unknown as Contact;
    return {
      id: rows[0].id,
      customer: { name: 'Ada', contact },
      billing: { name: 'Ada', contact: { ...contact } },
    };
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

describe('adversary 90: a @ResolveField() in a middleware output reads a sibling nulled by an error', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv90_gql_mw_rf_nulled', {
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

  const replayOf = async (key: string, query: string, field: 'customer' | 'billing') => {
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.errors).toHaveLength(1);
    expect(firstAnswer.body.data.createOrder[field]).toEqual({
      phoneLine: 'tel:555',
      contact: null,
    });
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: the same on billing, no middleware: the replay answers the first answer', async () => {
    await replayOf(
      'adv90-nulled-billing',
      'mutation { createOrder { id billing { phoneLine contact { phone email } } } }',
      'billing',
    );
  });

  it('behind middleware: the replay answers the first answer', async () => {
    await replayOf(
      'adv90-nulled-customer',
      'mutation { createOrder { id customer { phoneLine contact { phone email } } } }',
      'customer',
    );
  });
});
