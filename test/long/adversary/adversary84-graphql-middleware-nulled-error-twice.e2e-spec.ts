import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  Float,
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
 * Adversary 84 (graphql): a middleware field that ran at the first answer but lost its value
 * to an error in the mutation's own value (a line's non-null `price`, a Promise of a pricing
 * service that is down, nulls the line, the non-null list, and the nullable `createOrder`)
 * throws that error again on a replay, and so does the mutation's own replayed value: the
 * replay's `errors` holds the pricing error twice, where the first answer held it once. The
 * same operation without `profile` replays byte for byte (control).
 *
 * User code: `Order { id; profile (behind Nest field middleware `visible`, nullable); lines:
 * [Line!]! }`, `Line { sku; price: Float! }` where `price` is a Promise of a pricing service;
 * `createOrder` (nullable) with `@Idempotent()`; Apollo on Express. The client sends `mutation
 * { createOrder { id profile { name } lines { sku price } } }`, gets `createOrder: null` with
 * the pricing error (the order committed), and retries.
 *
 * Code path: lib/graphql/output-paths.ts `outputsIn` -> `nullingError` notes `profile` as
 * `nulled` by the error at `lines.1.price`; on the replay `outputAt` answers `{ kind: 'nulled'
 * }` and the wrapper (lib/graphql/middleware-outputs.ts) throws it again from `profile` (at the
 * stored error's path, `nullingPath`); `profile` is nullable, so graphql-js records it; then
 * the mutation's own replayed value throws the stored `price` error itself (wire-value.ts, "a
 * replay throws it again there"), which nulls `createOrder`: two entries (the price is a
 * Promise, so `profile` completes before the list fails, in either order of the selection).
 *
 * Docs (docs/guides/graphql.md): "The answers are the same bytes when the operation is, but
 * for the replay marker"; "A middleware field that ran but has no value in the first answer,
 * an ancestor nulled by an error elsewhere (...), answers that error again, at its own place:
 * it nulls the same ancestor".
 *
 * Severity: medium-low: the replay's bytes differ (an error listed twice), data alike; a
 * client that counts or shows errors sees two failures.
 *
 * Fails now: the replay's `errors` has the `pricing service unavailable` entry at
 * `createOrder.lines.1.price` twice; the first answer has it once.
 *
 * Suggested fix: where the error that nulled a middleware field's ancestor is the mutation's own
 * stored error (one its replayed value throws again itself), answer the middleware field
 * without throwing it (its ancestor is nulled by the replay anyway): `nulled` only for errors
 * a replay does not make again (a middleware's, another output's); or throw it from one place
 * only.
 *
 * Fixed: the `nulled` branch of the middleware field's wrapper
 * (lib/graphql/middleware-outputs.ts) marks the error it throws again (`noteRepeated`,
 * lib/graphql/repeated-errors.ts); the answer hooks (lib/graphql/replay-marker.ts: Apollo's
 * `willSendResponse`, Mercurius' `onResolution`) drop such a copy where another error with the
 * same message and path is in the answer (the mutation's own replayed value made it again), and
 * keep it where none is (an error under a `@ResolveField()` that did not recur). (commit:
 * fix84gql2 "replay: a middleware field's copy of an error the replay makes again, answered
 * once")
 */
let pool: Pool;

/** Nest's field middleware: the profile as the caller may see it. */
const visible: FieldMiddleware = async (_ctx, next) => {
  const profile = (await next()) as Profile | null;
  return profile && { ...profile };
};

@ObjectType()
class Profile {
  @Field()
  name!: string;
}

@ObjectType()
class Line {
  @Field()
  sku!: string;

  @Field(() => Float)
  price!: number;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Profile, { nullable: true, middleware: [visible] })
  profile?: Profile;

  @Field(() => [Line])
  lines!: Line[];
}

/** A price from the pricing service: down for one SKU. */
async function priceOf(sku: string): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, 5));
  if (sku === 'B-2') throw new Error('pricing service unavailable');
  return 9.5;
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
    const lines = ['A-1', 'B-2'].map((sku) => {
      const price = priceOf(sku);
      // Not read by every operation: no unhandled rejection where GraphQL does not read it.
      price.catch(() => undefined);
      return { sku, price: price as unknown as number };
    });
    return { id: rows[0].id, profile: { name: 'ada' }, lines };
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

describe('adversary 84: a middleware field nulled by an error of the mutation’s own value, replayed', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv84_gql_mw_nulled_twice', {
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

  const check = async (key: string, query: string) => {
    const first = await post(key, query);
    expect(first.body.data).toEqual({ createOrder: null });
    expect(first.body.errors).toEqual([
      expect.objectContaining({
        message: 'pricing service unavailable',
        path: ['createOrder', 'lines', 1, 'price'],
      }),
    ]);
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: no middleware field selected, the replay the same bytes', async () => {
    await check('adv84-twice-no-profile', 'mutation { createOrder { id lines { sku price } } }');
  });

  it('the profile selected: the replay the same bytes', async () => {
    await check(
      'adv84-twice-profile',
      'mutation { createOrder { id profile { name } lines { sku price } } }',
    );
  });
});
