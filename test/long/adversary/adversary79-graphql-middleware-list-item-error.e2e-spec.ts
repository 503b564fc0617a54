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
 * Adversary 79 (graphql): an error deeper than a middleware field (at one of its list's
 * items) is answered by the first call and lost on every replay, which answers the field
 * null with no error at all.
 *
 * The app: `Order { id tags: [String!] }`, `tags` behind Nest's field middleware `hideSecret`
 * (`const tags = await next(); return tags.map((t) => (t === 'secret' ? null : t))`), a
 * non-null item type as most schemas have; Apollo on Express; `@Idempotent()` on
 * `createOrder`. One order has a 'secret' tag.
 *
 * First answer (graphql-js): `tags: null` with the error "Cannot return null for non-nullable
 * field Order.tags." at the path `["createOrder", "tags", 1]` (the item's, under the field).
 *
 * Why: `outputsIn` (lib/graphql/output-paths.ts) keeps a middleware field's error only when
 * `relativeKey(root, error.path)` is exactly the field's key (`keys.includes(key)`): the
 * error's path here is `tags.1`, one step deeper (an item of its list; the same for an error
 * in a nested object's non-null field that nulls the field), so the stored output is `null`
 * with no error, and the replay's wrapper (`answerOutputsOf`, middleware-outputs.ts) answers
 * that null silently.
 *
 * Docs (docs/guides/graphql.md, "Field middleware: its output, as the first answer gave it"):
 * "a field the first answer gave as null with its error (a generator that throws part-way)
 * answers that error again, in graphql-js's words before your `formatError`"; and the
 * promise that every retry gets the first answer.
 *
 * Controls (pass): the same mutation without `@Idempotent()` answers the error; an order with
 * no secret tag is answered and replayed the same.
 *
 * Severity: medium (a replay answers a different answer from the first: the client that
 * retries sees a null list with no error, read as "no tags", where the first call said the
 * field failed).
 *
 * Fails now: the replay's body is `{ data: { createOrder: { id, tags: null } }, extensions }`
 * with no `errors` (expected the first answer's error at `["createOrder","tags",1]`).
 *
 * Suggested fix: in `outputsIn`, keep each error whose path is at or under a stored output
 * whose value at that path (or the nearest nullable ancestor within the output) is null,
 * with its full relative path; the replay's wrapper gives the field an output that makes
 * graphql-js raise it again where it was (or throws it at the field with the original path
 * restored in the answer hook).
 *
 * Fixed: `outputsIn` (lib/graphql/output-paths.ts) keeps each error where a stored output
 * holds null, at the field or under it (`tags.1`), with its locations; the replay's wrapper
 * (`outputValue`, middleware-outputs.ts) makes it again at that null, located at the replay's
 * path under the field (`fieldErrorAgain`, lib/graphql/replayed-field-error.ts); under
 * Mercurius' `jit`, which locates it at the field, the answer hook puts its own path back
 * (`ownPath`, lib/graphql/jit-located.ts). Mercurius, with and without `jit`:
 * adversary79-graphql-middleware-mercurius-replays.e2e-spec.ts.
 */
let pool: Pool;

/** Nest's field middleware: a secret tag is hidden. */
const hideSecret: FieldMiddleware = async (_ctx, next) => {
  const tags = (await next()) as string[] | null;
  return tags?.map((tag) => (tag === 'secret' ? null : tag)) ?? null;
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { nullable: true, middleware: [hideSecret] })
  tags?: string[];
}

async function createOrder(secret: boolean): Promise<Order> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  return { id: rows[0].id, tags: ['red', secret ? 'secret' : 'blue', 'green'] };
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  createOrder(
    @Args('secret', { type: () => Boolean, defaultValue: true }) secret: boolean,
  ): Promise<Order> {
    return createOrder(secret);
  }

  /** The control: the same mutation without the library. */
  @Mutation(() => Order, { nullable: true })
  createOrderPlain(): Promise<Order> {
    return createOrder(true);
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

describe('adversary 79: an error at an item of a middleware field’s list', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv79_gql_mw_item_error', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string | undefined, query: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) call.set('Idempotency-Key', key);
    return call.timeout(20_000).send(JSON.stringify({ query }));
  };

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createOrder'] } },
  });

  it('control: without @Idempotent(), the tags are null with the item’s error', async () => {
    const first = await post(undefined, 'mutation { createOrderPlain { id tags } }');
    expect(first.body.data).toEqual({ createOrderPlain: { id: expect.any(Number), tags: null } });
    expect(first.body.errors).toEqual([
      expect.objectContaining({
        message: 'Cannot return null for non-nullable field Order.tags.',
        path: ['createOrderPlain', 'tags', 1],
      }),
    ]);
  });

  it('control: no secret tag, answered and replayed', async () => {
    const query = 'mutation { createOrder(secret: false) { id tags } }';
    const first = await post('adv79-mw-item-ok', query);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), tags: ['red', 'blue', 'green'] } },
    });
    const again = await post('adv79-mw-item-ok', query);
    expect(again.body).toEqual(replayOf(first));
  });

  it('a secret tag: the item’s error answered, and replayed so', async () => {
    const query = 'mutation { createOrder { id tags } }';
    const first = await post('adv79-mw-item-bad', query);
    expect(first.body.data).toEqual({ createOrder: { id: expect.any(Number), tags: null } });
    expect(first.body.errors).toEqual([
      expect.objectContaining({ path: ['createOrder', 'tags', 1] }),
    ]);
    const again = await post('adv79-mw-item-bad', query);
    // Fails: the replay answers tags: null with no errors.
    expect(again.body).toEqual(replayOf(first));
  });
});
