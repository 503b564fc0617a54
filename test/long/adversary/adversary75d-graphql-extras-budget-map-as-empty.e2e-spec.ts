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
 * Adversary 75d: an unselected field that holds a `Map` (the documented input of a list
 * field's middleware, "a jsonb record or a `Map` it maps to a list") counts 2 bytes against the
 * 256 KiB kept of unselected fields for field middleware, and is stored whole: an order whose
 * 1.3 MB `lines` Map the client does not select makes the idempotent mutation fail for good
 * with `response_too_large`, the order rolled back, that 500 stored as the key's answer. The
 * same lines as an array are counted, left out past the budget, and the mutation answers.
 *
 * The app: `Order { id customer: Customer lines: [Line!]! }`, `customer` behind Nest's field
 * middleware `audit` (`const customer = await next(); log(customer.id); return customer`),
 * `lines` behind `fromMap` (`const lines = await next(); return lines instanceof Map ?
 * [...lines.values()] : lines`), the resolver returning `{ id, customer, lines: new Map(rows.map(
 * (row) => [row.sku, row])) }` (6,000 catalogue lines of ~220 bytes), `createOrder` with
 * `@Idempotent()` (the default 1 MiB limit), Apollo on Express. The client selects `{ id
 * customer { id name } }`: a 60-byte answer.
 *
 * Why: `Order` has a selected field behind middleware (`customer`), so `walkValue`
 * (lib/graphql/wire-value.ts) keeps its unselected own data within the budget: `fitExtras(
 * extras, walk.extrasLeft)` sizes each with lib/graphql/middleware-extras.ts `jsonSize`,
 * `JSON.stringify(value).length`, and JSON writes a `Map` (and a `Set`) as `{}`: 2. The `lines`
 * Map is kept in `KEPT`, where `keepData` (lib/graphql/kept-data.ts, superjson) writes every
 * entry; run-field.ts's `settle` then refuses the 1.3 MB body (`answer.body.length >
 * route.maxResponseBytes`): rolled back, `response_too_large` stored.
 *
 * Expected (docs/guides/graphql.md): "Those unselected fields are kept within 256 KiB (as
 * JSON) per stored answer, so that they never make an answer too large to store that the app
 * answers without the library: past that, a field (a large `avatar` column) is stored without
 * them, the fields left out named in the replay's losses"; and "an unselected large field does
 * not count against `maxResponseBytes`".
 *
 * Control: the same lines as an array (`lines: rows`), the same selection: counted, left out
 * past the budget with a loss, answered and replayed; passes.
 *
 * Severity: medium (correct, documented usage refused for good under that key with a
 * permanent 500 and the work rolled back).
 *
 * Fails now: the first answer is `data: { createOrder: null }` with `response_too_large`
 * ("The field's answer is larger than this mutation's maxResponseBytes (1048576 bytes) ...").
 *
 * Suggested fix: size what is stored, not JSON's writing of it: the superjson form `keepData`
 * writes (its `json`), in UTF-8 bytes; or size a `Map`/`Set` by its entries.
 * Fixed: lib/graphql/middleware-extras.ts `fitExtras` sizes each extra with
 * lib/graphql/kept-data.ts `keptBytes`, what superjson writes (a `Map`'s entries), in UTF-8
 * bytes, in place of `jsonSize` (JSON's `{}`, removed).
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

/** Nest's field middleware: the order's lines, kept by SKU, as a list. */
const fromMap: FieldMiddleware = async (_ctx, next) => {
  const lines: unknown = await next();
  return lines instanceof Map ? [...(lines as Map<string, Line>).values()] : lines;
};

@ObjectType()
class Customer {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;
}

@ObjectType()
class Line {
  @Field()
  sku!: string;

  @Field()
  description!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Customer, { middleware: [audit] })
  customer!: Customer;

  @Field(() => [Line], { middleware: [fromMap] })
  lines!: Map<string, Line> | Line[];
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
    @Args('array', { type: () => Boolean, defaultValue: false }) array: boolean,
  ): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders (customer_id) VALUES (1) RETURNING id',
    );
    const { rows: lines } = await pool.query<Line>(
      'SELECT sku, description FROM catalogue ORDER BY sku',
    );
    const customer = { id: 1, name: 'Ada' };
    // The control: the same lines as an array.
    return {
      id: rows[0].id,
      customer,
      lines: array ? lines : new Map(lines.map((line) => [line.sku, line])),
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
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 75d: an unselected Map beside a middleware field, counted as {}', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75d_gql_extras_map', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE catalogue (sku text PRIMARY KEY, description text NOT NULL)',
        );
        await admin.query(
          `INSERT INTO catalogue SELECT 'SKU-' || lpad(n::text, 6, '0'), repeat('d', 200)
             FROM generate_series(1, 6000) AS n`,
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

  it('control: the same lines as an array, unselected: answered and replayed', async () => {
    const query = 'mutation { createOrder(array: true) { id customer { id name } } }';
    const before = await count();
    const first = await post('adv75d-extras-map-c', query);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), customer: { id: 1, name: 'Ada' } } },
    });
    const again = await post('adv75d-extras-map-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('the lines as a Map, unselected: answered and replayed', async () => {
    const query = 'mutation { createOrder { id customer { id name } } }';
    const before = await count();
    const first = await post('adv75d-extras-map-a', query);
    // Fails: createOrder null, response_too_large, the order rolled back, that 500 stored.
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), customer: { id: 1, name: 'Ada' } } },
    });
    const again = await post('adv75d-extras-map-a', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
    expect(audited.length).toBeGreaterThan(0);
  });
});
