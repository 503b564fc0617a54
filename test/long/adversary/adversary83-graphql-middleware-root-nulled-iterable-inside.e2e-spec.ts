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
 * (a non-null mutation after the idempotent one that throws) stores a middleware output that
 * holds a list as a `Set` (or a field as a Promise) as never selected: the retry of the very
 * same operation answers `createOrder: null` with `field_not_stored` at
 * `createOrder.profile` ("was not selected by the first call ... use a new key for a new
 * operation"), though the order was made and its profile selected.
 *
 * The app: `createOrder` (nullable) with `@Idempotent()` answers `Order { id profile }`,
 * `profile: Profile { name tags: [String] }` behind Nest's field middleware `masked`, which
 * gives the profile with its name in capitals and its tags as a `Set` (deduplicated; GraphQL
 * takes any iterable as a list), or as a Promise (a lazy relation's); `notify: Boolean!`, a
 * mutation of its own that is not idempotent (a mail service, down at the first call). The
 * client sends `mutation { createOrder { id profile { name tags } } notify }`, gets `data:
 * null` with notify's error, and retries the same operation, as the docs ask.
 *
 * Why: `completedOutput` (lib/graphql/completed-output.ts:32, :29) gives up on any list that is
 * not an array and any Promise under the output (`unknowable`), so `remadeOutputs` stores no
 * output; the fallback, `nullingError` (lib/graphql/output-paths.ts:345-349), looks for an
 * error under the mutation that reached the root, and notify's is not under it: no `nulled`
 * mark either, and `outputAt` answers `unstored` (output-paths.ts:567), the replay's
 * `notStoredField`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "An operation whose whole `data` another
 * root field's error nulled (...) still stores each output, as GraphQL completed it from the
 * middleware's result: each field under it read from its parent's property, each member noted
 * (an output under a field your app resolves is not stored then)" (here no field is the
 * app's); "A list GraphQL takes as any iterable"; "A selected field whose value is a Promise
 * (a TypeORM lazy relation) is awaited and its value stored, as GraphQL awaits it".
 *
 * Control (passes): the tags an array, the same operation and retry.
 *
 * Severity: high (a retry of a committed order is told its field was never selected and to use
 * a new key; `createOrder` answers null, its id lost: a client that follows the message orders
 * twice). The same holds for every output `completedOutput` gives up on, which includes the
 * documented one (a field the app resolves): none should answer `field_not_stored`.
 *
 * Fails now: `data: { createOrder: null, notify: true }` with `field_not_stored` at
 * `createOrder.profile`.
 *
 * Suggested fix: in `completedOutput`, read a non-array iterable into an array (as GraphQL
 * reads it; an output's `Set`, a `Map`'s `values()`: note the array at the wrapper, as
 * `readList` does for the field's own list, so GraphQL and the store read the same items) and
 * await a Promise (`remadeOutputs` is async already); where an output still cannot be made,
 * store a mark that answers `field_output_pending` (its work done once, read it with a query),
 * never `unstored`.
 *
 * Fixed: `completedOutput` (lib/graphql/completed-output.ts) awaits a Promise under the output
 * (the answer hook awaits the remade output) and reads a list from any iterable that gives a
 * new iterator each time (`listItems`: a `Set`, a `Map`; a one-shot generator, spent by
 * GraphQL, still cannot be made); an output that cannot be made is stored as `lost`
 * (lib/graphql/output-paths.ts `outputsIn`), which a replay answers `field_output_pending`
 * (retryable, "read it with a query"), never `field_not_stored`.
 */
let pool: Pool;
let notifyFails = true;
let tagsAs: 'array' | 'set' | 'promise' | 'generator' = 'array';

/** Nest's field middleware: the profile as this caller may see it, its name in capitals. */
const masked: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as { name: string; tags: string[] } | null;
  if (value === null) return null;
  const tags =
    tagsAs === 'generator'
      ? (function* () {
          yield* value.tags;
        })()
      : tagsAs === 'set'
        ? new Set(value.tags)
        : tagsAs === 'promise'
          ? Promise.resolve(value.tags)
          : value.tags;
  return { name: value.name.toUpperCase(), tags };
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

describe('adversary 83: a middleware output holding an iterable, its whole data nulled by another root field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv83_gql_mw_root_iterable', {
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

  const QUERY = 'mutation { createOrder { id profile { name tags } } notify }';

  const check = async (key: string) => {
    notifyFails = true;
    const first = await post(key, QUERY);
    expect(first.body).toEqual({
      data: null,
      errors: [expect.objectContaining({ message: 'mail service unavailable', path: ['notify'] })],
    });
    notifyFails = false;
    const again = await post(key, QUERY);
    // Fails (Set, Promise): createOrder null, field_not_stored at createOrder.profile.
    const { rows } = await pool.query<{ id: number }>('SELECT max(id) AS id FROM orders');
    expect(again.body).toEqual({
      data: {
        createOrder: { id: rows[0].id, profile: { name: 'ADA', tags: ['vip', 'eu'] } },
        notify: true,
      },
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: the tags an array, notify down at the first call, the operation retried', async () => {
    tagsAs = 'array';
    await check('adv83-root-array');
  });

  it('the tags a Set: the retry answers the order made', async () => {
    tagsAs = 'set';
    await check('adv83-root-set');
  });

  it('the tags a Promise: the retry answers the order made', async () => {
    tagsAs = 'promise';
    await check('adv83-root-promise');
  });

  // Added (fixer): a one-shot generator (spent by GraphQL) cannot be made again; the retry
  // is told its output is pending (read it with a query), never to use a new key.
  it('the tags a generator: the retry answers field_output_pending, never field_not_stored', async () => {
    tagsAs = 'generator';
    notifyFails = true;
    const first = await post('adv83-root-generator', QUERY);
    expect(first.body.data).toBeNull();
    notifyFails = false;
    const again = await post('adv83-root-generator', QUERY);
    expect(again.body.data).toEqual({ createOrder: null, notify: true });
    expect(again.body.errors).toEqual([
      expect.objectContaining({
        path: ['createOrder', 'profile'],
        extensions: expect.objectContaining({ code: 'field_output_pending' }),
      }),
    ]);
    const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders');
    const before = rows[0].n;
    // The order was made once: a third call makes none.
    await post('adv83-root-generator', QUERY);
    const { rows: after } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM orders',
    );
    expect(after[0].n).toBe(before);
  });
});
