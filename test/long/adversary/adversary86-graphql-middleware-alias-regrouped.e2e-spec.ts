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
 * Adversary 86 (graphql): one field inside a field-middleware output selected under two
 * aliases, each with its own fields (`a: contact { phone } b: contact { email }`), retried by
 * a client whose operation selects the same fields under one response key (`a: contact {
 * phone email }`, `c: contact { phone email }` or `contact { phone email }`: the next release
 * of the app, a cache that normalizes the query). The retry answers `contact: null` with
 * `field_not_stored` at `...contact.email` ("was not selected by the first call ... use a new
 * key for a new operation"), though the first call selected and stored `email` (under `b`).
 * Adversary 84 found this at the middleware field itself; c4a2984 merges aliases one level
 * down only where the retry keeps the first call's aliases.
 *
 * User code: `Order.customer: Customer` behind Nest's field middleware `visible`;
 * `Customer.contact: Contact` (nullable), `Contact { phone email }`; `createOrder` with
 * `@Idempotent()`; Apollo on Express.
 *
 * Code path: lib/graphql/middleware-outputs.ts `outputValue` -> lib/graphql/merged-aliases.ts
 * `aliasGroups`: a retry's response key the first call stored (`a`) is answered from that
 * alias's stored object only (`own(responseKey)`); one it did not (`c`, `contact`) from
 * `storedSubkey`'s single stored key (the first alias's); the other alias's stored object (`b`,
 * holding `email`) is never read, and `email` becomes `notStoredField`.
 *
 * Docs (docs/guides/graphql.md): "A retry that selects the same fields (under other aliases,
 * through fragments, or fewer of them) gets the stored values. A retry that selects a field the
 * first call did not gets, for that field, an error".
 *
 * Severity: medium-high: an honest retry of a committed order answers `contact: null` and an
 * error telling it the field was never selected and to use a new key: a client that follows
 * it orders twice.
 *
 * Failed before the fix: `a: null` / `c: null` / `contact: null`, `field_not_stored` at
 * `createOrder.customer.<key>.email` (see the failing tests). Control (passes): the retry of
 * the operation as first sent.
 *
 * Suggested fix: in `aliasGroups`, answer each field a retry's response key selects from every
 * stored alias of the same named field (all of the first call's aliases of it, by `names`),
 * merged as `mergedAnswers` merges them, and refuse only a field none of them holds.
 *
 * Fixed (session of 2026-12-06, "graphql: a retry that groups one field's aliases otherwise"):
 * `aliasGroups` (lib/graphql/merged-aliases.ts) adds the first call's other stored aliases of
 * the same named field (by `names`), each with every selected node, and `outputValue` merges
 * them (`mergedAnswers`): each field read from the alias that stored it.
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

describe('adversary 86: two aliases inside a middleware output, retried regrouped', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv86_gql_mw_alias_regroup', {
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

  const FIRST =
    'mutation { createOrder { id customer { name a: contact { phone } b: contact { email } } } }';
  const replayed = { idempotency: { replayed: ['createOrder'] } };

  const first = async (key: string) => {
    withEmail = true;
    const answer = await post(key, FIRST);
    expect(answer.body.data.createOrder.customer).toEqual({
      name: 'Ada',
      a: { phone: '555-0100' },
      b: { email: 'ada@example.com' },
    });
    return answer.body.data.createOrder.id as number;
  };

  it('control: the retry as first sent', async () => {
    const id = await first('adv86-regroup-same');
    const again = await post('adv86-regroup-same', FIRST);
    expect(again.body).toEqual({
      data: {
        createOrder: {
          id,
          customer: { name: 'Ada', a: { phone: '555-0100' }, b: { email: 'ada@example.com' } },
        },
      },
      extensions: replayed,
    });
  });

  it('the retry selects both fields under the first alias', async () => {
    const id = await first('adv86-regroup-a');
    const again = await post(
      'adv86-regroup-a',
      'mutation { createOrder { id customer { name a: contact { phone email } } } }',
    );
    expect(again.body).toEqual({
      data: {
        createOrder: {
          id,
          customer: { name: 'Ada', a: { phone: '555-0100', email: 'ada@example.com' } },
        },
      },
      extensions: replayed,
    });
  });

  it('the retry selects both fields without an alias', async () => {
    const id = await first('adv86-regroup-none');
    const again = await post(
      'adv86-regroup-none',
      'mutation { createOrder { id customer { name contact { phone email } } } }',
    );
    expect(again.body).toEqual({
      data: {
        createOrder: {
          id,
          customer: { name: 'Ada', contact: { phone: '555-0100', email: 'ada@example.com' } },
        },
      },
      extensions: replayed,
    });
  });

  it('the retry selects both fields under a new alias', async () => {
    const id = await first('adv86-regroup-c');
    const again = await post(
      'adv86-regroup-c',
      'mutation { createOrder { id customer { name c: contact { phone email } } } }',
    );
    expect(again.body).toEqual({
      data: {
        createOrder: {
          id,
          customer: { name: 'Ada', c: { phone: '555-0100', email: 'ada@example.com' } },
        },
      },
      extensions: replayed,
    });
  });
});
