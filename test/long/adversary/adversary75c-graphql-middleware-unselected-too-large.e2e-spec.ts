import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
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
 * Adversary 75c: a field behind field middleware whose value holds a large field the client
 * does not select (a customer's `avatar`, a data URL) makes the idempotent mutation fail for
 * good: `response_too_large`, the order rolled back, the 500 stored as the key's answer; the
 * same app answers with the middleware removed, or without `@Idempotent()`.
 *
 * The app: `Order { id customer: Customer }`, `customer` behind Nest's field middleware
 * `audit` (`const customer = await next(); log(customer.id); return customer`), `Customer {
 * id name avatar }` where `avatar` is a ~1.2 MB data URL the row holds, `createOrder` with
 * `@Idempotent()` (default `maxResponseBytes`, 1 MiB), Apollo on Express. The client selects
 * `{ id customer { id name } }`: a 60-byte answer.
 *
 * Why: round 75b (ab65f75) walks a middleware field's value with `whole` (walkValue,
 * lib/graphql/wire-value.ts: `keepsWhole || middleware`), so `ownData(...)` keeps every
 * unselected field of `Customer` in the stored answer (`KEPT`), the 1.2 MB `avatar` too;
 * run-field.ts then refuses the answer (`answer.body.length > route.maxResponseBytes`), rolls
 * the order back and stores `response_too_large` as the key's answer. Before that commit only
 * the selection was stored.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "a field the operation
 * does not select is neither read ... nor stored, so ... an unselected large field does not
 * count against `maxResponseBytes`". The page says an unselected large column counts only
 * under a class-transformer class ("a large column the client did not select can make the
 * answer too large to store: select fewer columns into such a class"); the middleware
 * paragraph ("with all of its own data, unselected fields included") gives no such warning,
 * and an audit/logging middleware (a global `fieldMiddleware` most of all) reads none of it.
 *
 * Control: the same mutation and value on a field without middleware (`buyer`): answered and
 * replayed; passes.
 *
 * Severity: medium (correct usage refused for good under that key, with a permanent 500: an
 * app adding a logging field middleware turns every mutation returning a row with a large
 * unselected column into a failure).
 *
 * Fails now: the first answer is `data: null` with `response_too_large` ("The field's answer
 * is larger than this mutation's maxResponseBytes (1048576 bytes) ...").
 *
 * Suggested fix: keep a middleware input's unselected data only where something reads it
 * (it cannot be known: then say so in the docs, with the class-transformer case's warning),
 * or count only the selection against `maxResponseBytes` and bound the kept input separately,
 * with a loss logged rather than the mutation refused.
 *
 * Fixed: the unselected fields kept for field middleware (walkValue's `'middleware'` mode, and the
 * parent of a middleware field) are kept within `MIDDLEWARE_EXTRAS_BYTES` (256 KiB as JSON) per
 * stored answer (lib/graphql/middleware-extras.ts `fitExtras`); past it a field is stored without
 * them and a loss names them. Why a budget rather than none: a middleware may filter or mask by an
 * unselected field (adversary 75b), and a request that works without the library must never fail
 * with it; documented in docs/guides/graphql.md (a replay's middleware then finds nothing there).
 * (The parent of an `@ResolveField()` and a class-transformer class keep theirs unbounded, as
 * documented.)
 */
let pool: Pool;

/** Customers the audit middleware saw. */
const audited: number[] = [];

/** Nest's field middleware: an audit line per customer answered. */
const audit: FieldMiddleware = async (_ctx, next) => {
  const customer = (await next()) as { id: number };
  audited.push(customer.id);
  return customer;
};

@ObjectType()
class Customer {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;

  /** A profile picture as a data URL (the row's column). */
  @Field()
  avatar!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Customer, { middleware: [audit] })
  customer!: Customer;

  @Field(() => Customer, { nullable: true })
  buyer?: Customer;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(
    @Args('plain', { type: () => Boolean, defaultValue: false }) plain: boolean,
  ): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders (customer_id) VALUES (1) RETURNING id',
    );
    const { rows: customers } = await pool.query<Customer>(
      'SELECT id, name, avatar FROM customers WHERE id = 1',
    );
    const customer = customers[0];
    // The control: the same customer on a field without middleware.
    return plain ? { id: rows[0].id, customer, buyer: customer } : { id: rows[0].id, customer };
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

describe('adversary 75c: an unselected large field behind field middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75c_gql_mw_too_large', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, avatar text NOT NULL)',
        );
        await admin.query(
          `INSERT INTO customers VALUES (1, 'Ada', 'data:image/png;base64,' || repeat('A', 1200000))`,
        );
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, customer_id int NOT NULL)');
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

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createOrder'] } },
  });

  const count = async () =>
    Number((await pool.query<{ n: string }>('SELECT count(*) AS n FROM orders')).rows[0].n);

  it('control: the customer on a field without middleware, answered and replayed', async () => {
    const query = 'mutation { createOrder(plain: true) { id buyer { id name } } }';
    const before = await count();
    const first = await post('adv75c-mw-large-c', query);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), buyer: { id: 1, name: 'Ada' } } },
    });
    const again = await post('adv75c-mw-large-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('the customer behind the audit middleware: answered and replayed', async () => {
    const query = 'mutation { createOrder { id customer { id name } } }';
    const before = await count();
    const first = await post('adv75c-mw-large-a', query);
    // Fails: data null, response_too_large, the order rolled back, that 500 stored.
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), customer: { id: 1, name: 'Ada' } } },
    });
    const again = await post('adv75c-mw-large-a', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
    expect(audited.length).toBeGreaterThan(0);
  });
});
