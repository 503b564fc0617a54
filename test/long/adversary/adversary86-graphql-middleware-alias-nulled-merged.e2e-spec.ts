import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
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
 * Adversary 86 (graphql): one field selected under two aliases inside a field-middleware
 * output, where the first answer nulled one alias (a non-null field under it had no value:
 * `Cannot return null for non-nullable field Contact.email`) and answered the other
 * (`a: contact { phone email } b: contact { phone }` -> `a: null`, `b: { phone }`). The replay
 * answers BOTH aliases null, with an error under `b` that the first answer never had.
 *
 * User code: `Order.customer: Customer` behind Nest's field middleware `visible`;
 * `Customer.contact: Contact` (nullable), `Contact { phone: String!, email: String! }`, a
 * customer with no email on file; `createOrder` with `@Idempotent()`; Apollo on Express.
 *
 * Code path: lib/graphql/middleware-outputs.ts `outputValue` -> `aliasGroups` rebuilds each
 * alias from its own stored object (`a`: null -> `fieldErrorAgain`, an Error; `b`: `{ phone }`)
 * and lib/graphql/merged-aliases.ts `mergedAnswers(first, second)` keeps `first` whenever it is
 * not an object/list ("otherwise the first (... a stored error ...: both aliases read the same
 * field of the same object, so they agree but where a field under one of them failed)"): the
 * stored error of `a` becomes the one value GraphQL's default resolver reads for `a` AND `b`.
 *
 * Docs (docs/guides/graphql.md / README): replays return the first answer byte for byte; "A
 * retry that selects the same fields ... gets the stored values".
 *
 * Severity: medium: a replay of a committed mutation answers differently from the first
 * answer (data the client got at first is now null, with an extra error at
 * `createOrder.customer.b`): a client that reads `b.phone` from the retry sees a failure.
 *
 * Fails now: replay `customer: { name, a: null, b: null }`, two errors (see the failing test);
 * first answer `b: { phone: '555-0100' }`, one error.
 * The same app on Mercurius (`jit: 1`, Fastify) fails the same way (verified in review).
 *
 * Suggested fix: in `mergedAnswers`, an Error (stored error) from one alias must not win over
 * the other alias's object: keep per-alias values apart (resolve each alias's response key
 * from its own rebuilt value, e.g. a per-alias resolver on the rebuilt parent), or merge
 * so that the failed alias's error is thrown only where that alias's selection reaches it.
 *
 * Fixed (session of 2026-12-06, third): an alias's stored null made by an error under it is
 * rebuilt as that error marked with its steps as the rebuilt values read them (field names,
 * the properties Nest reads: `fieldSteps` in lib/graphql/middleware-outputs.ts,
 * `markErrorUnder` in lib/graphql/merged-aliases.ts); `mergedAnswers` puts it there in the
 * other alias's object, where that object holds every step above it and not its own place
 * (table-driven cases in merged-aliases.spec.ts). `a` reads `email`, gets the error at
 * `a.email` and is nulled as at the first answer; `b` never reads it. Checked on Apollo here;
 * the Mercurius variant was not rerun in this session.
 * Docs: docs/guides/graphql.md, "Field middleware".
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
  contact?: Contact;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Customer, { middleware: [visible] })
  customer!: Customer;
}

let withEmail = false;

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
    const contact = withEmail
      ? { phone: '555-0100', email: 'ada@example.com' }
      : ({ phone: '555-0100' } as Contact);
    return { id: rows[0].id, customer: { name: 'Ada', contact } };
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

describe('adversary 86: two aliases inside a middleware output, one nulled by an error', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv86_gql_mw_alias_nulled', {
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

  const QUERY =
    'mutation { createOrder { id customer { name a: contact { phone email } b: contact { phone } } } }';

  const orders = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders')).rows[0].n;

  it('control: both aliases answered: the replay is the first answer', async () => {
    withEmail = true;
    const before = await orders();
    const firstAnswer = await post('adv86-alias-both', QUERY);
    expect(firstAnswer.body.data.createOrder.customer).toEqual({
      name: 'Ada',
      a: { phone: '555-0100', email: 'ada@example.com' },
      b: { phone: '555-0100' },
    });
    const again = await post('adv86-alias-both', QUERY);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { ...firstAnswer.body.extensions, idempotency: { replayed: ['createOrder'] } },
    });
    expect(await orders()).toBe(before + 1);
  });

  it('one alias nulled at the first answer: the replay answers the other as it was', async () => {
    withEmail = false;
    const before = await orders();
    const firstAnswer = await post('adv86-alias-nulled', QUERY);
    expect(firstAnswer.body.data.createOrder.customer).toEqual({
      name: 'Ada',
      a: null,
      b: { phone: '555-0100' },
    });
    expect(firstAnswer.body.errors).toHaveLength(1);
    const again = await post('adv86-alias-nulled', QUERY);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { ...firstAnswer.body.extensions, idempotency: { replayed: ['createOrder'] } },
    });
    expect(await orders()).toBe(before + 1);
  });
});
