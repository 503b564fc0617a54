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
 * Adversary 81 (graphql): a retry that selects a subfield of a middleware field of object type
 * that the first call did not select gets a made-up null for it, with no error, where the docs
 * promise `field_not_stored`.
 *
 * The app: `Order { id shipping: Address billing: Address }`, `Address { street city }`;
 * `shipping` behind Nest's field middleware `audit` (an access check or a log that passes the
 * value on: `return next()`); `createOrder` with `@Idempotent()`; Apollo on Express. The first
 * call selects `shipping { street }`, the retry `shipping { street city }`.
 *
 * Why: a replayed middleware field answers its stored output rebuilt by `outputValue`
 * (lib/graphql/middleware-outputs.ts): for an object it copies each selected field that the
 * stored output holds (`if (!node || !fields[name]) continue;`) and silently leaves out the
 * rest. GraphQL's default resolver then reads `city` from that plain object: undefined, so
 * null. Nothing under the middleware field is refused: the `field_not_stored` check of the
 * mutation's own stored value never sees the output.
 *
 * Docs (docs/guides/graphql.md, "A retry that selects other fields"): "A retry that selects a
 * field the first call did not gets, for that field, an error, never a made-up null ... A
 * field behind Nest field middleware is refused as any other".
 *
 * Control (passes): the same retry on `billing`, the same type without middleware: `city` is
 * refused with `field_not_stored`.
 *
 * Severity: medium (a replay answers `city: null` for an address that has a city: the client
 * stores the order as having none, and nothing tells it the answer is not the stored one; on a
 * non-null field it would null the parent instead, with a graphql-js error that is not
 * `field_not_stored`).
 *
 * Fails now: the retry answers `shipping: { street: 'Main St 1', city: null }` and no errors.
 *
 * Suggested fix: in `outputValue`, for each field the retry selects under an object output
 * that the stored output does not hold (no response key of it, nor its named key), put in a
 * value that throws `notStoredField(type, field)` when GraphQL resolves it (a getter, or the
 * error as the value, as `fieldErrorAgain` does), unless the field has a resolver of its own.
 *
 * Fixed: `outputValue` (lib/graphql/middleware-outputs.ts) answers `notStoredField` for a selected
 * subfield read from its parent that the stored output does not hold (by named key or response
 * key), as the mutation's own value does.
 */
let pool: Pool;

/** Nest's field middleware that passes the value on (an access check, a log). */
const audit: FieldMiddleware = async (_ctx, next) => next();

@ObjectType()
class Address {
  @Field()
  street!: string;

  @Field({ nullable: true })
  city?: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Address, { nullable: true, middleware: [audit] })
  shipping?: Address;

  @Field(() => Address, { nullable: true })
  billing?: Address;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const address = { street: 'Main St 1', city: 'Springfield' };
    return { id: rows[0].id, shipping: { ...address }, billing: { ...address } };
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

describe('adversary 81: a retry that selects more under a middleware field of object type', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_object_more', {
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

  it('control: without middleware, the field the first call did not select is refused', async () => {
    const first = await post('adv81-more-ok', 'mutation { createOrder { id billing { street } } }');
    expect(first.body.errors).toBeUndefined();
    const again = await post(
      'adv81-more-ok',
      'mutation { createOrder { id billing { street city } } }',
    );
    expect(again.body.data.createOrder.billing).toEqual({ street: 'Main St 1', city: null });
    expect(again.body.errors).toEqual([
      expect.objectContaining({
        path: ['createOrder', 'billing', 'city'],
        extensions: expect.objectContaining({ code: 'field_not_stored' }),
      }),
    ]);
  });

  it('behind field middleware, the field the first call did not select is refused', async () => {
    const first = await post(
      'adv81-more-mw',
      'mutation { createOrder { id shipping { street } } }',
    );
    expect(first.body.errors).toBeUndefined();
    const again = await post(
      'adv81-more-mw',
      'mutation { createOrder { id shipping { street city } } }',
    );
    expect(again.body.data.createOrder.shipping).toEqual({ street: 'Main St 1', city: null });
    // Fails: no errors at all (city a made-up null).
    expect(again.body.errors).toEqual([
      expect.objectContaining({
        path: ['createOrder', 'shipping', 'city'],
        extensions: expect.objectContaining({ code: 'field_not_stored' }),
      }),
    ]);
  });
});
