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
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 81 (graphql): a sibling's error that nulls the parent of a middleware field at the
 * first answer makes the replay answer another error: `field_not_stored` on the middleware
 * field ("was not selected by the first call ... use a new key"), in place of the sibling's
 * own error, though the retry sends the first call's very operation.
 *
 * The app: `Order { id meta: Meta }` (nullable), `Meta { label: String! rate: Float! }`,
 * `label` behind Nest's field middleware `upper`, `rate` a `@ResolveField()` that calls a rates
 * service, which is down (throws). `createOrder` with `@Idempotent()`; Apollo on Express. The
 * first call selects `meta { label rate }`: `rate` throws, which nulls `meta` (its non-null
 * field), and the answer is `meta: null` with the rates error. The client retries.
 *
 * Why: at the first answer the middleware field's path is noted (`noteMiddlewarePath`), but
 * the answer holds no value at it (its parent is null) and no error at or under it (the error
 * is its sibling's), so `outputsIn` (lib/graphql/output-paths.ts) stores nothing for it. On
 * the replay, `label` (selected before `rate`) is looked up, `outputAt` finds no output and
 * answers `unstored`, and the wrapper (lib/graphql/middleware-outputs.ts) throws
 * `notStoredField`: as `label` is non-null, that error nulls `meta` first, and `rate` (whose
 * error was the first answer's) is never answered.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a field the first answer gave as null
 * with its error answers that error again where it was ... and one that nulled the field's
 * parent"; "A field the first call did not select is refused as any"; the promise: replays
 * answer the stored answer.
 *
 * Control (passes): the same operation with `rate` before `label`: the replay answers the
 * first answer's rates error, as the first answer did.
 *
 * Severity: medium (the replay's error differs from the first answer's, and it tells an
 * honest retry that it selected another field and to use a new key: following it creates a
 * second order).
 *
 * Fails now: the retry answers `meta: null` with only the `field_not_stored` error at
 * `createOrder.meta.label`; the rates error is gone.
 *
 * Suggested fix: at the first answer, where a middleware field that ran has no value because
 * its parent (or a parent above it) is null, store it as "under a null parent" (its key with
 * a marker, as the outputs of a null parent), and on a replay answer it null without an error
 * of its own (its sibling's stored error nulls the parent again); never `unstored` for a
 * field whose path was noted at the first answer.
 *
 * Fixed: as for the list: the middleware field nulled by its sibling's error is stored `nulled` by
 * that error (`nullingError`, lib/graphql/output-paths.ts), and a replay answers the sibling's
 * error again at the sibling's path, never `field_not_stored`.
 */
let pool: Pool;

/** Nest's field middleware: the text in capitals. */
const upper: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string | null;
  return value === null ? null : value.toUpperCase();
};

@ObjectType()
class Meta {
  @Field({ middleware: [upper] })
  label!: string;

  @Field(() => Float)
  rate!: number;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Meta, { nullable: true })
  meta?: Meta;
}

@Resolver(() => Meta)
class MetaResolver {
  /** The rates service, down. */
  @ResolveField(() => Float)
  rate(): number {
    throw new Error('rates service unavailable');
  }
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
    return { id: rows[0].id, meta: { label: 'gift', rate: 0 } };
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
  providers: [OrdersResolver, MetaResolver],
})
class OrdersModule {}

describe("adversary 81: a sibling's error nulls a middleware field's parent", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_sibling_error', {
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

  it('control: the sibling selected first: its error again', async () => {
    const query = 'mutation { createOrder { id meta { rate label } } }';
    const first = await post('adv81-sibling-ok', query);
    expect(first.body.data).toEqual({ createOrder: { id: expect.any(Number), meta: null } });
    expect(first.body.errors).toEqual([
      expect.objectContaining({
        message: 'rates service unavailable',
        path: ['createOrder', 'meta', 'rate'],
      }),
    ]);
    const again = await post('adv81-sibling-ok', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it("the middleware field selected first: the sibling's error again, not field_not_stored", async () => {
    const query = 'mutation { createOrder { id meta { label rate } } }';
    const first = await post('adv81-sibling-mw', query);
    expect(first.body.data).toEqual({ createOrder: { id: expect.any(Number), meta: null } });
    expect(first.body.errors).toEqual([
      expect.objectContaining({
        message: 'rates service unavailable',
        path: ['createOrder', 'meta', 'rate'],
      }),
    ]);
    const again = await post('adv81-sibling-mw', query);
    // Fails: errors is [field_not_stored at createOrder.meta.label]; the rates error is gone.
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });
});
