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
 * Adversary 75d: the 256 KiB kept of a field middleware's unselected fields is counted in
 * UTF-16 characters, not bytes: a customer's unselected `bio` of 250,000 CJK characters
 * counts as 250 KB and is kept, yet it stores as 750 KB of UTF-8, three times the budget the
 * docs state; next to a 320 KB selected receipt the stored answer passes the default 1 MiB
 * `maxResponseBytes`, and the mutation fails for good with `response_too_large`, the order
 * rolled back, that 500 stored as the key's answer. The same app answers (a 320 KB answer)
 * with the middleware removed, or without `@Idempotent()`.
 *
 * The app: `Order { id receipt customer: Customer }`, `customer` behind Nest's field
 * middleware `audit` (`const customer = await next(); log(customer.id); return customer`),
 * `Customer { id name bio }` where `bio` is a Japanese text column (250,000 characters),
 * `createOrder` with `@Idempotent()` (the default 1 MiB limit), Apollo on Express. The client
 * selects `{ id receipt customer { id name } }`.
 *
 * Why: lib/graphql/middleware-extras.ts `jsonSize` returns `JSON.stringify(value).length`,
 * the string's UTF-16 length; `fitExtras` compares it with `MIDDLEWARE_EXTRAS_BYTES` (256 *
 * 1024 "bytes"), so `walkValue` (lib/graphql/wire-value.ts) keeps `bio` in `KEPT`, and
 * run-field.ts's `settle` measures the stored body in bytes (`Buffer.from(body)`,
 * `answer.body.length > route.maxResponseBytes`): 320 KB + 750 KB is over 1 MiB, refused,
 * rolled back, `response_too_large` stored. Any text outside ASCII (accents, CJK, emoji)
 * counts for less than it stores.
 *
 * Expected (docs/guides/graphql.md): "Those unselected fields are kept within 256 KiB (as
 * JSON) per stored answer, so that they never make an answer too large to store that the app
 * answers without the library: past that, a field (a large `avatar` column) is stored without
 * them, the fields left out named in the replay's losses"; and "an unselected large field does
 * not count against `maxResponseBytes`".
 *
 * Controls: the same mutation and row on a field without middleware (`buyer`), and a customer
 * whose `bio` is 250,000 ASCII characters behind the same middleware (kept too, 250 KB stored):
 * answered and replayed; pass.
 *
 * Severity: medium (correct usage refused for good under that key with a permanent 500 and
 * the work rolled back; an app whose rows hold non-ASCII text gets up to three times the
 * stated budget).
 *
 * Fails now: the first answer is `data: { createOrder: null }` with `response_too_large`
 * ("The field's answer is larger than this mutation's maxResponseBytes (1048576 bytes) ...").
 *
 * Suggested fix: count bytes: `Buffer.byteLength(JSON.stringify(...))` in `jsonSize` (and
 * bound the budget by the room the route has left: see
 * adversary75d-graphql-extras-budget-over-route-limit).
 * Fixed: lib/graphql/middleware-extras.ts `fitExtras` sizes each extra with
 * lib/graphql/kept-data.ts `keptBytes` (the UTF-8 bytes, `Buffer.byteLength`, of the superjson
 * form `keepData` writes) in place of `jsonSize` (UTF-16 length, removed).
 */
let pool: Pool;

const receipt = 'r'.repeat(320_000);

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

  /** The customer's profile text (a text column, in Japanese). */
  @Field()
  bio!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  /** The order's printed receipt (selected). */
  @Field()
  receipt!: string;

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
    @Args('customer', { type: () => Int, defaultValue: 1 }) customerId: number,
  ): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders (customer_id) VALUES ($1) RETURNING id',
      [customerId],
    );
    const { rows: customers } = await pool.query<Customer>(
      'SELECT id, name, bio FROM customers WHERE id = $1',
      [customerId],
    );
    const customer = customers[0];
    const order = { id: rows[0].id, receipt, customer };
    // The control: the same customer on a field without middleware.
    return plain ? { ...order, buyer: customer } : order;
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

describe('adversary 75d: kept unselected fields of non-ASCII text, counted in characters', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75d_gql_extras_utf8', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, bio text NOT NULL)',
        );
        await admin.query(
          `INSERT INTO customers VALUES (1, 'Ada', repeat('漢', 250000)), (2, 'Bob', repeat('k', 250000))`,
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
    const query = 'mutation { createOrder(plain: true) { id receipt buyer { id name } } }';
    const before = await count();
    const first = await post('adv75d-extras-utf8-c', query);
    expect(first.body).toEqual({
      data: {
        createOrder: { id: expect.any(Number), receipt: receipt, buyer: { id: 1, name: 'Ada' } },
      },
    });
    const again = await post('adv75d-extras-utf8-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('control: an ASCII bio of the same length behind the middleware, answered and replayed', async () => {
    const query = 'mutation { createOrder(customer: 2) { id receipt customer { id name } } }';
    const before = await count();
    const first = await post('adv75d-extras-utf8-b', query);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), receipt, customer: { id: 2, name: 'Bob' } } },
    });
    const again = await post('adv75d-extras-utf8-b', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('the customer behind the audit middleware: answered and replayed', async () => {
    const query = 'mutation { createOrder { id receipt customer { id name } } }';
    const before = await count();
    const first = await post('adv75d-extras-utf8-a', query);
    // Fails: createOrder null, response_too_large, the order rolled back, that 500 stored.
    expect(first.body).toEqual({
      data: {
        createOrder: { id: expect.any(Number), receipt: receipt, customer: { id: 1, name: 'Ada' } },
      },
    });
    const again = await post('adv75d-extras-utf8-a', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
    expect(audited.length).toBeGreaterThan(0);
  });
});
