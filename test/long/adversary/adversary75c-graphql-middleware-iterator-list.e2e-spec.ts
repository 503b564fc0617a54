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
 * Adversary 75c: a list field whose value is an iterator (a `Map`'s `keys()`, a generator),
 * which GraphQL takes as any iterable, behind a pass-through field middleware (a logger, a
 * timer: `const value = await next(); log(...); return value`) answers the first call and
 * fails every replay: the iterator is stored as `{}`, which the replay's list cannot iterate.
 *
 * The app: `Order { id skus: [String!]! }`, `skus` given as `bySku.keys()` (a MapIterator)
 * behind the middleware `logged` (`return next()` with a log line), `createOrder` with
 * `@Idempotent()`, Apollo on Express:
 *
 *   const logged: FieldMiddleware = async (ctx, next) => {
 *     const value = await next();
 *     seen.push(String(ctx.info?.fieldName));
 *     return value;
 *   };
 *   @Field(() => [String], { middleware: [logged] }) skus!: Iterable<string>;
 *   return { id, skus: bySku.keys() };
 *
 * Why: the round 75b fix (ab65f75) keeps a list field's middleware input that is no array
 * as it is (walkValue's `keepInput` under `!fitsListType(...)`, lib/graphql/wire-value.ts;
 * fitsListType, middleware-input.ts, takes only an array): an iterator is never read as a
 * list. keepData (kept-data.ts, plainCopy) copies it as its own enumerable data: `{}`, its
 * `next` named a loss. On a replay the middleware gives `{}` to GraphQL: "Expected Iterable,
 * but did not find one for field "Order.skus"."; the field is non-null, so `createOrder` is
 * null, on every retry of the committed order.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "A list GraphQL takes as
 * any iterable: a generator or a `Map`'s `values()` is read once, and the first answer is
 * given the list that was read and stored"; and for middleware: "Field middleware wraps
 * Nest's read of the property, so the field itself is stored as its middleware's input ...
 * on a replay it runs again on that stored input". The middleware here maps nothing: the list
 * is what GraphQL reads, as without it.
 *
 * Control: the same field without the middleware (walked, the iterator read as a list): first
 * answer and replay equal; pass. And the middleware without `@Idempotent()`: answered.
 *
 * Severity: high (every retry of a committed order gets data null and an error; a logging or
 * timing middleware, a global `fieldMiddleware` most of all, is everywhere, and iterators of
 * Maps are an ordinary list value).
 *
 * Fails now: the replay is `{ createOrder: null }` with the error "Expected Iterable, but did
 * not find one for field "Order.skus".", the first answer `skus: ["A-1", "B-2"]`.
 *
 * Suggested fix: fitsListType should take any iterable GraphQL takes as a list (not a
 * string, and not a Map, whose entries the middleware may not want) and read it once as the
 * walk does (the first answer given that list); or keep a one-shot iterator as the array it
 * was read into.
 *
 * Fixed: a one-shot iterator fits a list type (lib/graphql/middleware-input.ts `fitsListType`,
 * `isOneShot`): walkValue reads it once into an array, stores it as a list and gives the first
 * answer's middleware that array.
 */
let pool: Pool;

/** Fields the logging middleware saw. */
const seen: string[] = [];

/** Nest's field middleware: logs the field, and gives its value as it is. */
const logged: FieldMiddleware = async (ctx, next) => {
  const value: unknown = await next();
  seen.push(String(ctx.info?.fieldName));
  return value;
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { middleware: [logged] })
  skus!: Iterable<string>;

  @Field(() => [String], { nullable: true })
  skusPlain?: Iterable<string>;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async insert(): Promise<{ id: number; bySku: Map<string, number> }> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders (lines) VALUES (2) RETURNING id',
    );
    const bySku = new Map([
      ['A-1', 2],
      ['B-2', 1],
    ]);
    return { id: rows[0].id, bySku };
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(
    @Args('plain', { type: () => Boolean, defaultValue: false }) plain: boolean,
  ): Promise<Order> {
    const { id, bySku } = await this.insert();
    // The control: the same iterator on a field without middleware.
    return plain ? { id, skus: [], skusPlain: bySku.keys() } : { id, skus: bySku.keys() };
  }

  @Mutation(() => Order, { nullable: true })
  async createOrderUnkeyed(): Promise<Order> {
    const { id, bySku } = await this.insert();
    return { id, skus: bySku.keys() };
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

describe('adversary 75c: an iterator on a list field behind a pass-through middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75c_gql_mw_iterator', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, lines int NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createOrder'] } },
  });

  const count = async () =>
    Number((await pool.query<{ n: string }>('SELECT count(*) AS n FROM orders')).rows[0].n);

  it('control: the iterator on a field without middleware, answered and replayed', async () => {
    const query = 'mutation { createOrder(plain: true) { id skusPlain } }';
    const before = await count();
    const first = await post('adv75c-mw-iterator-c', query);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), skusPlain: ['A-1', 'B-2'] } },
    });
    const again = await post('adv75c-mw-iterator-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('control: the middleware without @Idempotent(): answered', async () => {
    const first = await post('adv75c-mw-iterator-u', 'mutation { createOrderUnkeyed { id skus } }');
    expect(first.body).toEqual({
      data: { createOrderUnkeyed: { id: expect.any(Number), skus: ['A-1', 'B-2'] } },
    });
  });

  it('the iterator behind the logging middleware: replayed as the first answer', async () => {
    const query = 'mutation { createOrder { id skus } }';
    const before = await count();
    const first = await post('adv75c-mw-iterator-a', query);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), skus: ['A-1', 'B-2'] } },
    });
    const again = await post('adv75c-mw-iterator-a', query);
    // Fails: { createOrder: null } with "Expected Iterable, but did not find one for field
    // "Order.skus"." (the iterator was stored as {}).
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
    expect(seen.length).toBeGreaterThan(0);
  });
});
