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
 * Adversary 83 (graphql): an operation whose whole `data` another root field's error nulled
 * (a non-null mutation after the idempotent one that throws) stores a middleware output whose
 * fields the operation selects through a named fragment (`profile { ...ProfileFields }`, as
 * Apollo Client and codegen write every query) as never selected: the retry of the very same
 * operation answers `createOrder: null` with `field_not_stored` at `createOrder.profile`
 * ("was not selected by the first call ... use a new key for a new operation").
 *
 * The app: `createOrder` (nullable) with `@Idempotent()` answers `Order { id profile }`,
 * `profile: Profile { name tags }` behind Nest's field middleware `masked` (a copy, name in
 * capitals); `notify: Boolean!`, a mutation of its own that is not idempotent (a mail
 * service, down at the first call). The client sends `mutation { createOrder { id profile {
 * ...ProfileFields } } notify } fragment ProfileFields on Profile { name tags }`, gets `data:
 * null` with notify's error, and retries the same operation, as the docs ask.
 *
 * Why: `completedOutput` looks for GraphQL's `__typename` in the output's selection
 * (`typenameNodes`, lib/graphql/completed-output.ts:57, :70-88), and gives up on any fragment
 * spread, whether or not it selects `__typename` (`inner` is undefined for a spread, :76, so it
 * throws at :83): the output is `unknowable`, none is stored, no `nulled` mark either (notify's
 * error is not under the mutation: `nullingError`, lib/graphql/output-paths.ts:345-349), and
 * the replay answers `unstored` (output-paths.ts:567).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "An operation whose whole `data` another
 * root field's error nulled (...) still stores each output, as GraphQL completed it from the
 * middleware's result: each field under it read from its parent's property, each member noted
 * (an output under a field your app resolves is not stored then)"; "named and inline fragments
 * whose type the value is" (what is stored).
 *
 * Control (passes): the same fields inline (`profile { name tags }`).
 *
 * Severity: high (the retry of a committed order is told its field was never selected and to
 * use a new key; `createOrder` answers null, its id lost: a client that follows the message
 * orders twice), and named fragments are how most clients write their operations.
 *
 * Fails now: `data: { createOrder: null, notify: true }` with `field_not_stored` at
 * `createOrder.profile`.
 *
 * Suggested fix: find `__typename` through fragment spreads too (resolve the spread by
 * `fragments[name]` and its type condition, as `selectedFields` does for the other fields), or
 * collect it with `selectedFields`' own walk for the concrete type; and where an output still
 * cannot be made, never answer `unstored` for a field the first call selected (a
 * `field_output_pending` mark).
 *
 * Fixed: `completedOutput` (lib/graphql/completed-output.ts) collects the output's fields,
 * `__typename` among them, with `selectedFields(..., own)` (lib/graphql/selection.ts), which
 * resolves named fragment spreads by the document's fragments and their type conditions; an
 * output that still cannot be made is stored as `lost` (lib/graphql/output-paths.ts
 * `outputsIn`), which a replay answers `field_output_pending`, never `field_not_stored`.
 */
let pool: Pool;
let notifyFails = true;

/** Nest's field middleware: the profile as this caller may see it, its name in capitals. */
const masked: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as { name: string; tags: string[] } | null;
  return value === null ? null : { ...value, name: value.name.toUpperCase() };
};

@ObjectType()
class Profile {
  @Field()
  name!: string;

  @Field(() => [String])
  tags!: string[];
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Profile, { middleware: [masked] })
  profile!: Profile;
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
    return { id: rows[0].id, profile: { name: 'ada', tags: ['vip', 'eu'] } };
  }

  /** Not idempotent, and non-null: a mail service that is down at the first call. */
  @Mutation(() => Boolean)
  notify(): boolean {
    if (notifyFails) throw new Error('mail service unavailable');
    return true;
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

describe('adversary 83: a middleware output selected through a named fragment, its whole data nulled by another root field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv83_gql_mw_root_fragment', {
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

  const FRAGMENT = 'fragment ProfileFields on Profile { name tags }';

  const check = async (key: string, query: string) => {
    notifyFails = true;
    const first = await post(key, query);
    expect(first.body).toEqual({
      data: null,
      errors: [expect.objectContaining({ message: 'mail service unavailable', path: ['notify'] })],
    });
    notifyFails = false;
    const again = await post(key, query);
    // Fails (named fragment): createOrder null, field_not_stored at createOrder.profile.
    const { rows } = await pool.query<{ id: number }>('SELECT max(id) AS id FROM orders');
    expect(again.body).toEqual({
      data: {
        createOrder: { id: rows[0].id, profile: { name: 'ADA', tags: ['vip', 'eu'] } },
        notify: true,
      },
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it("control: the profile's fields inline, notify down at the first call, retried", async () => {
    await check(
      'adv83-frag-inline',
      'mutation { createOrder { id profile { name tags } } notify }',
    );
  });

  it("the profile's fields in a named fragment: the retry answers the order made", async () => {
    await check(
      'adv83-frag-named',
      `mutation { createOrder { id profile { ...ProfileFields } } notify } ${FRAGMENT}`,
    );
  });
});
