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
 * Adversary 82 (graphql): the key twice in one operation, the second call selecting a field
 * inside a middleware output of object type that the first call did not: the operation's
 * answer gives it (`b.shipping.city: 'Paris'`), but the retry of that very operation refuses
 * it with `field_not_stored` ("... use a new key for a new operation"), which nulls `b`. A
 * client whose first answer was lost sends the same operation again, as the docs ask, and is
 * told to use a new key: a second order.
 *
 * The app: `Order.shipping: Address { street city }` behind Nest's field middleware
 * `visible` (it gives the address as the caller may see it); `createOrder` with
 * `@Idempotent({ keyFrom: { arg } })`; Apollo. The operation: `a: createOrder(idempotencyKey:
 * "K") { id shipping { street } } b: createOrder(idempotencyKey: "K") { id shipping { street
 * city } }` (two parts of a UI that each add their call to one generated document).
 *
 * Why: the second call's middleware field answers the first call's raw middleware result
 * (`sharedAt`, lib/graphql/output-paths.ts:496; lib/graphql/middleware-outputs.ts:115),
 * which holds every field of the address, and GraphQL reads `city` from it. The stored output
 * is what the answer holds at the first call's path (`a.shipping`: `street` only); the retry
 * finds no `city` in it and refuses it (`outputValue`'s `notStoredField`). For the same
 * operation without middleware (the mutation's own value), the second call is answered from
 * the stored value and `city` is refused at once, in the first answer too.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A field the first call did not select,
 * the middleware field or one inside its output, is refused as any (see "A retry that selects
 * other fields")"; "Send a retry the operation the first call sent"; and the promise: the
 * answers are the same bytes when the operation is, but for the replay marker.
 *
 * Control (passes): the same selection in both calls, then the operation retried.
 *
 * Severity: medium (the retry of the operation the client sent answers `b: null` and an error
 * that says to use a new key, where the first answer gave the order; a client that follows it
 * orders twice).
 *
 * Fails now: the retry answers `b: null` with `field_not_stored` at `b.shipping.city`, where
 * the first answer gave `b: { id, shipping: { street: 'Main St 1', city: 'Paris' } }`.
 *
 * Suggested fix: answer the key-twice call from what the first call selected, as its replay
 * will: refuse a field inside a shared output that the first call's selection does not hold
 * (`field_not_stored`, at the first answer too), the same check `outputValue` makes on a
 * stored output; or (weaker) store under the output what every call of the key in the
 * operation selected.
 *
 * Fixed: the key met again answers the first call's output made again as GraphQL completed it
 * for the first call's selection (`completedOutput`; `remadeShared`, lib/graphql/output-
 * paths.ts), through `outputValue` as a stored output is (lib/graphql/middleware-outputs.ts): a
 * field the first call did not select is refused (`field_not_stored`) at the first answer too,
 * as the mutation's own values are, and its retry answers the same. Where the output cannot be
 * made so (a field under it the app resolves), the middleware's result is answered as before.
 */
let pool: Pool;

/** Nest's field middleware: the address as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const address = (await next()) as Address;
  return { ...address };
};

@ObjectType()
class Address {
  @Field()
  street!: string;

  @Field()
  city!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Address, { middleware: [visible] })
  shipping!: Address;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  async createOrder(@Args('idempotencyKey') _key: string): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, shipping: { street: 'Main St 1', city: 'Paris' } };
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

describe('adversary 82: the key twice in one operation, the second selecting more of an output', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_gql_mw_twice_more', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const twice = (key: string, more: string) =>
    `mutation { a: createOrder(idempotencyKey: "${key}") { id shipping { street } } ` +
    `b: createOrder(idempotencyKey: "${key}") { id shipping { street ${more} } } }`;

  it('control: the same selection twice, then the operation retried', async () => {
    const first = await post(twice('adv82-more-ok', ''));
    const id = first.body.data?.a?.id;
    expect(first.body).toEqual({
      data: {
        a: { id: expect.any(Number), shipping: { street: 'Main St 1' } },
        b: { id, shipping: { street: 'Main St 1' } },
      },
      extensions: { idempotency: { replayed: ['b'] } },
    });
    const again = await post(twice('adv82-more-ok', ''));
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['a', 'b'] } },
    });
  });

  it('the second call selects more: the retry of the operation answers as it did', async () => {
    const first = await post(twice('adv82-more-city', 'city'));
    // Changed (fixer): the second call is answered what the first call selected, as its
    // replays are (and as the mutation's own values are): `city` refused at once.
    expect(first.body.data?.a?.shipping).toEqual({ street: 'Main St 1' });
    expect(first.body.data?.b).toBeNull();
    expect(first.body.errors).toEqual([
      expect.objectContaining({
        path: ['b', 'shipping', 'city'],
        extensions: expect.objectContaining({ code: 'field_not_stored' }),
      }),
    ]);
    const again = await post(twice('adv82-more-city', 'city'));
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['a', 'b'] } },
    });
  });
});
