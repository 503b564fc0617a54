import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ApolloServerPluginCacheControlDisabled } from '@apollo/server/plugin/disabled';
import { Module } from '@nestjs/common';
import { Args, GraphQLModule, Mutation, Query, Resolver } from '@nestjs/graphql';
import { defaultFieldResolver, type GraphQLFieldResolver } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07, fourth): the library never gives a resolver to a field that had
 * none (field-wrappers.ts `wrapsField`, in placed-reads.ts and middleware-outputs.ts' wrappers):
 * the executor's field resolver, the app's `fieldResolver`, keeps reading every schema-first field;
 * such a field answers one object's first place's read at each place (docs/guides/graphql.md).
 *
 * Adversary 111 (graphql, today's placed reads): a schema-first Apollo app that sets its own
 * default field resolver (Apollo Server's `fieldResolver` option, passed through
 * `GraphQLModule.forRoot`: here the classic camelCase field from a snake_case column of a
 * node-postgres row) loses it on EVERY field of the schema at its first keyed mutation, for
 * good. `answerPlacedReadsOf` puts a wrapper on each property field, reading through
 * `field.resolve ?? graphql.defaultFieldResolver`: a schema-first field has no `resolve` (the
 * executor's `fieldResolver`, the app's, reads it), so the wrapper reads it with graphql-js'
 * default instead, and being a `resolve` now, the executor never calls the app's again. The
 * keyed mutation itself commits its row and answers `Cannot return null for non-nullable
 * field Order.customerName` (data: null: the client sees a failure for an effect that ran,
 * and its key holds that failure); every later query of the app, none of them idempotent,
 * answers the same error until the process restarts. Only where Apollo wrapped the fields
 * itself first (a plugin with `willResolveField`, as its default cache-control plugin) does
 * the app's resolver survive: disabling cache control (`ApolloServerPluginCacheControlDisabled`,
 * Apollo's documented switch for an app that does not use it) is enough to lose it.
 *
 * User code: schema-first (`typeDefs`), `type Order { id: Int! customerName: String! }`,
 * `@Query() orders()` and `@Mutation() @Idempotent() placeOrder(customer)` returning
 * `pool.query(...).rows` (`customer_name`), `GraphQLModule.forRoot<ApolloDriverConfig>({
 * driver: ApolloDriver, typeDefs, fieldResolver: snakeCaseColumns, plugins:
 * [ApolloServerPluginCacheControlDisabled()] })`.
 *
 * Code path: lib/graphql/intercept-field.ts `fieldSteps` -> placed-reads.ts
 * `answerPlacedReadsOf` (`own = field.resolve ?? graphql.defaultFieldResolver`; `field.resolve
 * = resolve` on every field `fieldResolution` calls 'property', of every type of the schema).
 *
 * Docs quote (docs/guides/graphql.md): "A replay's resolvers get the same values as the first
 * call's, and the answer is the same bytes"; the brief's promise: a first answer is what the
 * app answers without the library. Nothing in the docs says a keyed mutation changes how the
 * app's other queries read their fields.
 *
 * Severity: high (a wrong first answer for a committed effect, and every later query of the
 * app broken, idempotent or not).
 *
 * Fails now (un-skipped): before the first keyed mutation `{"data":{"orders":[{"id":1,
 * "customerName":"Ada"}]}}`; the keyed `placeOrder(customer: "Bob")` answers
 * `{"errors":[{"message":"Cannot return null for non-nullable field Order.customerName.",
 * "path":["placeOrder","customerName"]}],"data":null}` (its row inserted); then the same
 * `orders` query answers the same error at `["orders",0,"customerName"]`.
 *
 * Controls: the same query before any keyed mutation reads through the app's resolver
 * (passes). Before commit 72fab1f2 (no wrapper on property fields) the app's resolver kept
 * answering.
 *
 * Suggested fix: never put a resolver on a field that had none: wrap only fields whose
 * `resolve` is set (code-first Nest fields, Apollo's wrapper), or have the wrapper fall back
 * to the executor's own field resolver (Apollo's `fieldResolver`, kept on the context as
 * Apollo's own wrapper reads it, or `info`-less: leave `resolve` undefined and answer placed
 * reads from the walk's Proxy instead); check every wrapper the library installs on the schema
 * (middleware-outputs.ts too) for the same fallback.
 */
let pool: Pool;

/** The app's own default read: a camelCase field from its snake_case column (node-postgres rows). */
const snakeCaseColumns: GraphQLFieldResolver<unknown, unknown> = (source, args, context, info) => {
  if (typeof source === 'object' && source !== null) {
    const column = info.fieldName.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
    if (column in source) return (source as Record<string, unknown>)[column];
  }
  return defaultFieldResolver(source, args, context, info);
};

interface Order {
  id: number;
  customer_name: string;
}

const typeDefs = `
  type Order {
    id: Int!
    customerName: String!
  }
  type Query {
    orders: [Order!]!
  }
  type Mutation {
    placeOrder(customer: String!): Order!
  }
`;

@Resolver()
class OrdersResolver {
  @Query()
  async orders(): Promise<Order[]> {
    const { rows } = await pool.query<Order>('SELECT id, customer_name FROM orders ORDER BY id');
    return rows;
  }

  @Mutation()
  @Idempotent()
  async placeOrder(@Args('customer') customer: string): Promise<Order> {
    const { rows } = await pool.query<Order>(
      'INSERT INTO orders (customer_name) VALUES ($1) RETURNING id, customer_name',
      [customer],
    );
    return rows[0];
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      typeDefs,
      graphiql: false,
      fieldResolver: snakeCaseColumns,
      plugins: [ApolloServerPluginCacheControlDisabled()],
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe("adversary 111: the app's own fieldResolver after the first keyed mutation", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv111_gql_field_resolver', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE orders (id serial PRIMARY KEY, customer_name text NOT NULL)',
        );
        await admin.query("INSERT INTO orders (customer_name) VALUES ('Ada')");
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string, key?: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(60_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send(JSON.stringify({ query }));
  };

  it('control: a query before any keyed mutation reads through the app’s fieldResolver', async () => {
    const before = await post('{ orders { id customerName } }');
    // eslint-disable-next-line no-console
    console.log('BEFORE', before.text);
    expect(before.body.errors).toBeUndefined();
    expect(before.body.data.orders).toEqual([{ id: 1, customerName: 'Ada' }]);
  });

  it('a keyed mutation and later queries read through the app’s fieldResolver', async () => {
    const placed = await post(
      'mutation { placeOrder(customer: "Bob") { id customerName } }',
      'adv111-fr-1',
    );
    const after = await post('{ orders { id customerName } }');
    // eslint-disable-next-line no-console
    console.log('PLACED', placed.text, 'AFTER', after.text);
    const { rows } = await fixture.admin.query('SELECT count(*)::int AS n FROM orders');
    expect(rows[0].n).toBe(2);
    expect(placed.body.errors).toBeUndefined();
    expect(placed.body.data.placeOrder).toEqual({ id: 2, customerName: 'Bob' });
    expect(after.body.errors).toBeUndefined();
    expect(after.body.data.orders).toEqual([
      { id: 1, customerName: 'Ada' },
      { id: 2, customerName: 'Bob' },
    ]);
  });
});
