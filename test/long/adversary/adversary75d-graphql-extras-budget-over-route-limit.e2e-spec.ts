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
 * Adversary 75d: the 256 KiB kept of a field middleware's unselected fields is a fixed figure,
 * not a share of the route's own `maxResponseBytes`: a mutation whose route takes a smaller
 * limit (`@Idempotent({ maxResponseBytes: 64 * 1024 })`) and whose middleware field's row has
 * a 100 KB column the client does not select fails for good with `response_too_large`, the
 * order rolled back, that 500 stored as the key's answer. The same app answers (a 60-byte
 * answer) with the middleware removed, or without `@Idempotent()`.
 *
 * The app: `Order { id customer: Customer }`, `customer` behind Nest's field middleware
 * `audit` (`const customer = await next(); log(customer.id); return customer`), `Customer {
 * id name notes }` where `notes` is a 100 KB text column, `createOrder` with
 * `@Idempotent({ maxResponseBytes: 64 * 1024 })` (a route of small answers, as the options
 * reference invites), Apollo on Express. The client selects `{ id customer { id name } }`.
 *
 * Why: round 75c (0ae9339) bounds the unselected fields kept for field middleware with
 * `MIDDLEWARE_EXTRAS_BYTES` (lib/graphql/middleware-extras.ts, 256 KiB, "a quarter of the
 * default `maxResponseBytes`"), and `outputWire` (lib/graphql/wire-value.ts) starts every walk
 * with `extrasLeft: MIDDLEWARE_EXTRAS_BYTES` whatever the route's limit and whatever the
 * selection already takes; `walkValue`'s `fitExtras(extras, walk.extrasLeft)` keeps `notes`
 * (100 KB < 256 KiB) in `KEPT`, and run-field.ts's `settle` refuses the answer
 * (`answer.body.length > route.maxResponseBytes`): rolled back, `response_too_large` stored.
 * The same happens under the default 1 MiB limit for a selection over 768 KiB.
 *
 * Expected (docs/guides/graphql.md): "an unselected large field does not count against
 * `maxResponseBytes`", and of field middleware: "Those unselected fields are kept within 256
 * KiB (as JSON) per stored answer, so that they never make an answer too large to store that
 * the app answers without the library: past that, a field (a large `avatar` column) is stored
 * without them, the fields left out named in the replay's losses".
 *
 * Control: the same mutation, limit and row on a field without middleware (`buyer`):
 * answered and replayed; passes.
 *
 * Severity: medium (correct, documented usage refused for good under that key with a
 * permanent 500 and the mutation's work rolled back; any route with a lowered limit and a
 * logging middleware over a row with a text column).
 *
 * Fails now: the first answer is `data: { createOrder: null }` with `response_too_large`
 * ("The field's answer is larger than this mutation's maxResponseBytes (65536 bytes) ...").
 *
 * Suggested fix: give the walk the room the route has left: `extrasLeft` = min(the budget,
 * the route's `maxResponseBytes` less the stored answer's size without the extras), e.g.
 * walk the selection first, then add the extras in order while the encoded body fits; past
 * it drop them with a loss, never refuse the answer for them.
 * Fixed: lib/graphql/wire-value.ts `walkValue` no longer fits the extras as it walks: it queues
 * each object's (`PendingExtras`), and `placeExtras` (called by `outputWire`, which run-field.ts
 * now gives the route's `maxResponseBytes`) writes them once the selection is walked, within
 * min(`MIDDLEWARE_EXTRAS_BYTES`, the limit less the answer without them); should the written
 * answer still be over, all are left out (losses logged).
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

  /** The account manager's notes (a text column). */
  @Field()
  notes!: string;
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
  @Idempotent({ maxResponseBytes: 64 * 1024 })
  async createOrder(
    @Args('plain', { type: () => Boolean, defaultValue: false }) plain: boolean,
  ): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders (customer_id) VALUES (1) RETURNING id',
    );
    const { rows: customers } = await pool.query<Customer>(
      'SELECT id, name, notes FROM customers WHERE id = 1',
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

describe('adversary 75d: the kept unselected fields against a route of a smaller limit', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75d_gql_extras_route', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, notes text NOT NULL)',
        );
        await admin.query(`INSERT INTO customers VALUES (1, 'Ada', repeat('n', 100000))`);
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
    const first = await post('adv75d-extras-route-c', query);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), buyer: { id: 1, name: 'Ada' } } },
    });
    const again = await post('adv75d-extras-route-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('the customer behind the audit middleware: answered and replayed', async () => {
    const query = 'mutation { createOrder { id customer { id name } } }';
    const before = await count();
    const first = await post('adv75d-extras-route-a', query);
    // Fails: createOrder null, response_too_large, the order rolled back, that 500 stored.
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), customer: { id: 1, name: 'Ada' } } },
    });
    const again = await post('adv75d-extras-route-a', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
    expect(audited.length).toBeGreaterThan(0);
  });
});
