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
 * Adversary 75b: a Nest field middleware that turns its raw property into the field's list
 * (a jsonb `{ sku: qty }` column answered as `[Line]`) is given another value by the library:
 * the idempotent mutation's FIRST answer is `data: null` with an error, its order committed,
 * and every retry replays that error. Without `@Idempotent()` the same app answers the lines.
 *
 * The app: `Order { id lines: [Line!]! }`, `Line { sku qty }`, the property `lines` the
 * order's jsonb column (`{ "A-1": 2, "B-7": 1 }`, as node-postgres parses it: `RETURNING id,
 * quantities AS lines`) behind Nest's field middleware `linesOf` (`const quantities = await
 * next(); return Object.entries(quantities).map(([sku, qty]) => ({ sku, qty }))`), the
 * mutation `placeOrder(customer)` with `@Idempotent()` and the `Idempotency-Key` header,
 * Apollo on Express. (Seen too under Mercurius with `jit` and a global `fieldMiddleware`; a
 * property renamed with `@Field({ name: 'lines' }) quantities` passes.)
 *
 * Why: round 75 (fdb3ef6) stores a middleware field "as a plain field": walkValue
 * (lib/graphql/wire-value.ts) walks the raw property with the field's type, a list, and
 * `materialized`/`listOf` make a list of a value that is not one (`[{ "A-1": 2, ... }]`: the
 * object wrapped, where graphql-js would refuse it). That walk does not throw, so the catch
 * that keeps a middleware's raw input "as it is" never runs; and since the walked list is not
 * the resolver's value, the first answer is given it (`replaced[name] = stored.value`,
 * through `over()`): the middleware's `next()` reads `[{ "A-1": 2, "B-7": 1 }]`, its
 * `Object.entries` gives `[["0", {...}]]`, and `qty` is an object: "Int cannot represent
 * non-integer value". A `Map` property (`new Map([["A-1", 2]])`, read by the middleware with
 * `.entries()`) is turned into an array of its entries the same way.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "Field middleware wraps
 * Nest's read of the property, so the field itself is stored as any field is (...; a raw value
 * the field's type refuses, which the middleware maps, kept as it is), and its middleware runs
 * again on a replay on that stored raw property"; and "The first call gets the resolver's own
 * value".
 *
 * Control: the same order placed by `placeOrderUnkeyed` (no `@Idempotent()`): answered with its
 * two lines; passes.
 *
 * Severity: high (a committed order answered as a failure, on the first call and on every
 * retry of its key: the client never gets its answer; correct usage of Nest's documented
 * field middleware broken by adding `@Idempotent()`).
 *
 * Fails now: the first answer is `data: null` with `Int cannot represent non-integer value:
 * { A-1: 2, B-7: 1 }` at `placeOrder.lines.0.qty` (the order committed).
 *
 * Suggested fix: behind field middleware, never hand the first answer a value the walk made
 * (a list read from a non-list): give Nest's read the raw property, and keep a raw value that
 * is not of the field's shape (a non-iterable for a list, a `Map`, an object for a scalar) as
 * it is, as the catch does for a type's refusal.
 *
 * Fixed: a middleware field of a list type whose raw value is no array (a record, a Map) is
 * not walked but kept as it is (`fitsListType`, lib/graphql/middleware-input.ts, in walkValue,
 * lib/graphql/wire-value.ts), and the first answer gets the resolver's own value.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field()
  sku!: string;

  @Field(() => Int)
  qty!: number;
}

/** Nest's field middleware: the jsonb `{ sku: qty }` written as a list of lines. */
const linesOf: FieldMiddleware = async (_ctx, next) => {
  const quantities = (await next()) as Record<string, number>;
  return Object.entries(quantities).map(([sku, qty]) => ({ sku, qty }));
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line], { middleware: [linesOf] })
  lines!: Record<string, number>;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async place(customer: string): Promise<Order> {
    const { rows } = await pool.query<Order>(
      `INSERT INTO orders (customer, quantities) VALUES ($1, '{"A-1": 2, "B-7": 1}')
       RETURNING id, quantities AS lines`,
      [customer],
    );
    return rows[0];
  }

  @Mutation(() => Order)
  @Idempotent()
  placeOrder(@Args('customer') customer: string): Promise<Order> {
    return this.place(customer);
  }

  @Mutation(() => Order)
  placeOrderUnkeyed(@Args('customer') customer: string): Promise<Order> {
    return this.place(customer);
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

describe('adversary 75b: a field middleware mapping a jsonb record to its list field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75b_gql_mw_record_list', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE orders (id serial PRIMARY KEY, customer text NOT NULL, quantities jsonb NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query }));

  const orders = async (customer: string) =>
    Number(
      (
        await pool.query<{ n: string }>('SELECT count(*) AS n FROM orders WHERE customer = $1', [
          customer,
        ])
      ).rows[0].n,
    );

  const lines = [
    { sku: 'A-1', qty: 2 },
    { sku: 'B-7', qty: 1 },
  ];

  it('control: without @Idempotent(), the order is answered with its lines', async () => {
    const first = await post(
      'adv75b-mw-record-u',
      'mutation { placeOrderUnkeyed(customer: "ada") { id lines { sku qty } } }',
    );
    expect(first.body).toEqual({
      data: { placeOrderUnkeyed: { id: expect.any(Number), lines } },
    });
  });

  it('with @Idempotent(): answered with its lines, and replayed so', async () => {
    const query = 'mutation { placeOrder(customer: "grace") { id lines { sku qty } } }';
    const first = await post('adv75b-mw-record-a', query);
    // Fails: data null, "Int cannot represent non-integer value: { A-1: 2, B-7: 1 }".
    expect(first.body).toEqual({ data: { placeOrder: { id: expect.any(Number), lines } } });
    const again = await post('adv75b-mw-record-a', query);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['placeOrder'] } },
    });
    expect(await orders('grace')).toBe(1);
  });
});
