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
import { GraphQLError } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 82 (graphql): an error with Apollo's `extensions.http` (a 429 and its
 * `Retry-After`, a `Map`) thrown by a middleware field inside a middleware output of object
 * type, which nulls that output, is replayed without its header, with `extensions.http:
 * { status: 429, headers: {} }` written into the error's JSON for the client to see, and
 * without its `locations`. The same error at the middleware field itself is replayed right.
 *
 * The app: `Order.shipping: Address` (nullable) behind Nest's field middleware `visible`;
 * `Address.street: String!` behind `quota`, a geocoding quota that is spent and throws
 * Apollo's `GraphQLError` with `extensions.http` (status 429, `Retry-After: 30`), as Apollo's
 * docs show for rate limits; `createOrder` with `@Idempotent()`; Apollo on Express. The first
 * answer: `shipping: null` (the non-null `street` nulls it), the error at
 * `createOrder.shipping.street`, `Retry-After: 30`.
 *
 * Why: the error is stored among the outputs' errors with its `extensions` through JSON
 * (`plainExtensions`, lib/graphql/output-paths.ts:329,351): the `Map` of headers becomes `{}`.
 * As `street` is a middleware field whose output is noted null, the error counts as its own,
 * not one under it (`deeper` false, output-paths.ts:269), so no `locations` are kept; and
 * `thrown` (with its `httpHeaders`) is not what the replay throws here: the replayed
 * `shipping` is null, so `outputValue` (lib/graphql/middleware-outputs.ts:299) makes the
 * error under it with `fieldErrorAgain` (lib/graphql/replayed-field-error.ts:52-56), a new
 * `GraphQLError` of the stored `extensions`. Apollo merges an error's `extensions.http` only
 * when its `headers` is a `Map` (`isPartialHTTPGraphQLHead`): `{}` is not, so the header is
 * not set and `http` stays in the JSON.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a field the first answer gave as null
 * with its error answers that error again where it was ... the middleware's own (what it
 * threw, of its kind ...), one under it ..., and one that nulled the field's parent"; for a
 * resolver's error: "A `GraphQLError`'s `extensions.http` (Apollo Server's status and
 * `headers`, a `Map`: a `Retry-After`, say) is replayed as it was, its headers a `Map` again,
 * so the retry gets the same status, headers and body".
 *
 * Control (passes): the same error at the middleware field itself (`note`): same status,
 * header and body.
 *
 * Severity: medium (the work is done once; the retry loses the `Retry-After` a client's
 * backoff reads, its body shows an `http` extension the first answer never had, and its
 * error has no `locations`).
 *
 * Fails now: the replay answers no `Retry-After`, and the error `{ message, path, extensions:
 * { code: 'RATE_LIMITED', http: { status: 429, headers: {} } } }` (no `locations`).
 *
 * Suggested fix: store an error's `extensions.http.headers` as entries (as `fieldError` does
 * for a resolver's error: `httpHeaders`) and make them a `Map` again in `fieldErrorAgain`;
 * keep the `locations` of an error that is not at the middleware field being replayed (here,
 * one under the replayed output), or throw the stored `thrown` error located there.
 *
 * Fixed: an error made again under a replayed output takes its `extensions.http.headers` as a
 * `Map` again from what was thrown (`extensionsAgain`, lib/graphql/replayed-field-error.ts,
 * with `withHttpHeaders` of thrown-error.ts), and an error inside another middleware field's
 * output keeps its `locations` (`outputsIn`, lib/graphql/output-paths.ts).
 */
let pool: Pool;

/** Nest's field middleware: the address as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const address = (await next()) as Address;
  return { ...address };
};

/** Nest's field middleware: a geocoding quota, spent: Apollo's 429 with its Retry-After. */
const quota: FieldMiddleware = async (_ctx, next) => {
  await next();
  throw new GraphQLError('geocoding quota exceeded', {
    extensions: {
      code: 'RATE_LIMITED',
      http: { status: 429, headers: new Map([['retry-after', '30']]) },
    },
  });
};

@ObjectType()
class Address {
  @Field({ middleware: [quota] })
  street!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field({ nullable: true, middleware: [quota] })
  note?: string;

  @Field(() => Address, { nullable: true, middleware: [visible] })
  shipping?: Address;
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
    return { id: rows[0].id, note: 'ring twice', shipping: { street: 'Main St 1' } };
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

describe("adversary 82: an error's status and headers under a middleware output", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_gql_mw_error_http', {
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

  const replayed = { idempotency: { replayed: ['createOrder'] } };

  it('control: the error at the middleware field itself', async () => {
    const query = 'mutation { createOrder { id note } }';
    const first = await post('adv82-http-own', query);
    expect(first.headers['retry-after']).toBe('30');
    const again = await post('adv82-http-own', query);
    expect([again.status, again.headers['retry-after']]).toEqual([
      first.status,
      first.headers['retry-after'],
    ]);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it('the error under a middleware output: the replay answers its status and headers', async () => {
    const query = 'mutation { createOrder { id shipping { street } } }';
    const first = await post('adv82-http-under', query);
    expect(first.headers['retry-after']).toBe('30');
    expect(first.body.data).toEqual({ createOrder: { id: expect.any(Number), shipping: null } });
    const again = await post('adv82-http-under', query);
    // Fails: no Retry-After; extensions.http { status: 429, headers: {} } in the body; no
    // locations.
    expect([again.status, again.headers['retry-after']]).toEqual([
      first.status,
      first.headers['retry-after'],
    ]);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });
});
