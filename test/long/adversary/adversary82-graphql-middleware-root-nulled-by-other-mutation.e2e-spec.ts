import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ForbiddenException, Module } from '@nestjs/common';
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
 * Adversary 82 (graphql): an operation whose `data` is nulled by another root field's error
 * (a non-null mutation after the idempotent one that throws) stores the idempotent mutation's
 * middleware output as never selected: the retry of the very same operation answers
 * `createOrder: null` with `field_not_stored` ("was not selected by the first call ... use a
 * new key for a new operation"), though the order was made and its `label` was selected.
 *
 * The app: `createOrder` with `@Idempotent()` answers `Order { id label }`, `label` behind
 * Nest's field middleware `upper`; `notify: Boolean!`, a mutation of its own that is not
 * idempotent (a mail service, down at the first call). The client sends `mutation {
 * createOrder { id label } notify }`; the first answer is `data: null` with notify's error
 * (graphql-js nulls the whole `data` for a non-null root field); the client retries the same
 * operation, as the docs ask.
 *
 * Why: at the answer hook, the middleware field `createOrder.label` has no value in `data`
 * (null), no error at or under it, and `nullingError` (lib/graphql/output-paths.ts:295-310)
 * looks for a null ancestor only from the mutation's field down (`end >= root.length`):
 * `dataAt(null, ['createOrder'])` is undefined, not null, and the root's `data` itself is
 * never looked at; notify's error is not under the mutation, so not even `located`
 * (output-paths.ts:236). Nothing is stored for `label`, neither an output nor a `nulled`
 * mark, and the replay answers it as a field the first call did not select
 * (`outputAt`: `unstored`).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A middleware field that ran but has no
 * value in the first answer, an ancestor nulled by an error elsewhere (a sibling's, another
 * item's of a non-null list), answers that error again, at its own place: it nulls the same
 * ancestor"; "A field the first call did not select ... is refused as any"; "Send a retry the
 * operation the first call sent".
 *
 * The same for Nest's default non-null mutation type (`@Mutation(() => Order)`) whose answer a
 * sibling's error nulls (`secret`'s middleware throws `ForbiddenException`: `placeOrder` is
 * null, so `data` is): the retry answers `field_not_stored` at `placeOrder.label` ("... use a
 * new key"), in place of the sibling's `FORBIDDEN` error at `placeOrder.secret`.
 *
 * Control (passes): notify up at the first call, then the operation retried.
 *
 * Severity: high (a retry of a committed order is told the order's field was never selected
 * and to use a new key; `createOrder` answers null, its id lost: a client that follows the
 * message orders twice).
 *
 * Fails now: `data: { createOrder: null, notify: true }` with `field_not_stored` at
 * `createOrder.label`.
 *
 * Suggested fix: keep the middleware's output where graphql-js completed it even when an
 * ancestor above the mutation (the root `data`) was nulled: note each completed output at the
 * wrapper (its completed value, or the result GraphQL completed), not only from the answer's
 * `data`; or, where the whole `data` is null, treat the root as the nulled ancestor (store the
 * output or a `nulled` mark of its own), and never answer `field_not_stored` for a field the
 * first call selected.
 *
 * Fixed: where the answer's `data` lost the mutation's field (a null above it: the whole
 * `data`), the answer hook makes each middleware output again from its middleware's result as
 * GraphQL completed it (`completedOutput`, lib/graphql/completed-output.ts: by the response
 * keys selected, each scalar serialized, only where each field under it is read from its
 * parent's property and each member was noted; `remadeOutputs`, lib/graphql/output-paths.ts);
 * an output that cannot be made so is marked nulled by an error under the mutation that reached
 * the root (`nullingError` now looks above the mutation's field, `nulledAncestor`).
 */
let pool: Pool;
let notifyFails = true;

/** Nest's field middleware: the text in capitals. */
const upper: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string | null;
  return value === null ? null : value.toUpperCase();
};

/** Nest's field middleware: a field this caller may not read. */
const forbidden: FieldMiddleware = async (_ctx, next) => {
  await next();
  throw new ForbiddenException('not yours to read');
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field({ middleware: [upper] })
  label!: string;

  @Field({ middleware: [forbidden] })
  secret!: string;
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
    return { id: rows[0].id, label: 'first order', secret: 's3cr3t' };
  }

  /** Nest's default: a mutation's type is non-null. */
  @Mutation(() => Order)
  @Idempotent()
  async placeOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, label: 'placed order', secret: 's3cr3t' };
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

describe('adversary 82: a middleware output whose whole data was nulled by another root field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_gql_mw_root_nulled', {
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

  const QUERY = 'mutation { createOrder { id label } notify }';

  it('control: notify up at the first call, the operation retried', async () => {
    notifyFails = false;
    const first = await post('adv82-root-ok', QUERY);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), label: 'FIRST ORDER' }, notify: true },
    });
    const again = await post('adv82-root-ok', QUERY);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  });

  it('notify down at the first call: the retry answers the order made', async () => {
    notifyFails = true;
    const first = await post('adv82-root-down', QUERY);
    expect(first.body).toEqual({
      data: null,
      errors: [expect.objectContaining({ message: 'mail service unavailable', path: ['notify'] })],
    });
    notifyFails = false;
    const again = await post('adv82-root-down', QUERY);
    // Fails: createOrder null, field_not_stored at createOrder.label.
    const { rows } = await pool.query<{ id: number }>('SELECT max(id) AS id FROM orders');
    expect(again.body).toEqual({
      data: { createOrder: { id: rows[0].id, label: 'FIRST ORDER' }, notify: true },
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  });

  it('a non-null mutation nulled by its own sibling: the retry answers the first answer', async () => {
    const query = 'mutation { placeOrder { id label secret } }';
    const first = await post('adv82-root-sibling', query);
    expect(first.body).toEqual({
      data: null,
      errors: [
        expect.objectContaining({
          message: 'not yours to read',
          path: ['placeOrder', 'secret'],
          extensions: expect.objectContaining({ code: 'FORBIDDEN' }),
        }),
      ],
    });
    const again = await post('adv82-root-sibling', query);
    // Fails: field_not_stored at placeOrder.label, not FORBIDDEN at placeOrder.secret.
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['placeOrder'] } },
    });
  });
});
