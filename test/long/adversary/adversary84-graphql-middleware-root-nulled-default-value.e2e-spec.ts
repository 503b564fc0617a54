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
 * Adversary 84 (graphql): an operation whose whole `data` another root field's error nulled
 * (a non-null mutation after the idempotent one that throws) stores a middleware output made
 * again from the middleware's result (`completedOutput`), which reads each field from its
 * parent's property but not as Nest's code-first schema reads it: a `@Field({ defaultValue })`
 * whose property is `undefined` is made `null`, where GraphQL (Nest's property reader) answered
 * the default. The retry answers `tier: null` with no error, where every answer of the app
 * (the first call's completion, a query, the normal road's replay) says `"standard"`.
 *
 * User code: `Profile { name; @Field({ nullable: true, defaultValue: 'standard' }) tier }`
 * behind Nest field middleware `masked` (a copy, name in capitals; the stored profile has no
 * tier, so it takes the default); `notify: Boolean!`, a non-idempotent mutation after the
 * idempotent `createOrder` that fails at the first call. The client retries the operation.
 *
 * Code path: lib/graphql/completed-output.ts `completedOutput`: `own = object[nestField(...)
 * ?.property ?? name]`, `walk` gives `null` for `undefined`; `nestField(...).fallback` (lib/
 * graphql/nest-fields.ts, the `defaultValue`) is never read there, though wire-value.ts reads it
 * for the mutation's own value.
 *
 * Docs (docs/guides/graphql.md): "An operation whose whole `data` another root field's error
 * nulled (...) still stores each output, as GraphQL completed it from the middleware's result:
 * each field under it read from its parent's property"; and "Each field is read as Nest's
 * code-first schema reads it: (...) and its `@Field({ defaultValue })` where that property is
 * `undefined`."
 *
 * Severity: medium-high: a replay answers a value the app never gives (null for a field whose
 * default is set), no error, marked as a replay of the first call.
 *
 * Fails now: the retry answers `profile: { name: "ADA", tier: null }`; the control (notify up
 * at the first call, the answer hook reads the answer's data) replays `tier: "standard"`.
 *
 * Suggested fix: in `completedOutput`'s walk, read a field as `nestField`'s reader does: its
 * `fallback.value` where the property is `undefined` (as wire-value.ts does), or share one
 * reader of a parent's field between the two walks.
 *
 * Fixed: `completedOutput` (lib/graphql/completed-output.ts) reads a field as Nest's reader
 * does: its `@Field({ defaultValue })` (`nestField(...).fallback`) where the property is
 * `undefined`, as wire-value.ts does. (commit: fix84gql2 "root-nulled outputs: a failure inside
 * made null where GraphQL nulled it")
 */
let pool: Pool;
let notifyFails = true;

/** Nest's field middleware: the profile as this caller may see it, its name in capitals. */
const masked: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as { name: string } | null;
  return value === null ? null : { ...value, name: value.name.toUpperCase() };
};

@ObjectType()
class Profile {
  @Field()
  name!: string;

  @Field({ nullable: true, defaultValue: 'standard' })
  tier?: string;
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
    return { id: rows[0].id, profile: { name: 'ada' } };
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

describe('adversary 84: a middleware output with a defaultValue field, its whole data nulled by another root field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv84_gql_mw_root_default', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const QUERY = 'mutation { createOrder { id profile { name tier } } notify }';

  const post = (key: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query: QUERY }));

  const expected = async () => {
    const { rows } = await pool.query<{ id: number }>('SELECT max(id) AS id FROM orders');
    return {
      data: {
        createOrder: { id: rows[0].id, profile: { name: 'ADA', tier: 'standard' } },
        notify: true,
      },
      extensions: { idempotency: { replayed: ['createOrder'] } },
    };
  };

  it('control: notify up at the first call, the replay answers the default tier', async () => {
    notifyFails = false;
    const first = await post('adv84-default-up');
    expect(first.body.data.createOrder.profile).toEqual({ name: 'ADA', tier: 'standard' });
    const again = await post('adv84-default-up');
    expect(again.body).toEqual(await expected());
  });

  it('notify down at the first call: the retry answers the default tier, as GraphQL completed it', async () => {
    notifyFails = true;
    const first = await post('adv84-default-down');
    expect(first.body).toEqual({
      data: null,
      errors: [expect.objectContaining({ message: 'mail service unavailable', path: ['notify'] })],
    });
    notifyFails = false;
    const again = await post('adv84-default-down');
    expect(again.body).toEqual(await expected());
  });
});
