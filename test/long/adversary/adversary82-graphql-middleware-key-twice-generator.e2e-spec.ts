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
 * Adversary 82 (graphql): the key twice in one operation, under a field middleware that gives
 * its list as a generator (GraphQL takes any iterable for a list): the second call answers the
 * list empty, `b: { tags: [] }`, where the first call answered `['GIFT', 'EXPRESS']`, and no
 * error. Any one-shot iterable does the same (`array.values()`, an iterator helper's `map`).
 *
 * The app: `Order.tags` behind Nest's field middleware `upperTags`, which yields each tag in
 * capitals (`function*`); `createOrder` with `@Idempotent({ keyFrom: { arg } })`; Apollo. A
 * client sends the key twice in one operation (a form submitted twice into one batched
 * document, a generated operation that repeats the call under two aliases).
 *
 * Why: the first call's middleware result is kept as it is (`noteFirstResult`,
 * lib/graphql/middleware-outputs.ts:111; `results`, lib/graphql/output-paths.ts), and the
 * second call's field answers that same object again (`sharedAt`, output-paths.ts:496;
 * middleware-outputs.ts:115). GraphQL completed the first call's list by iterating the
 * generator, which is spent: the second call's list iterates nothing. Mutations run in
 * series, so the first call's list is always complete before the second reads it.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "The key met again in the operation whose
 * answer stores the outputs (the key twice in one operation) waits for nothing: its middleware
 * fields answer what the first call's middleware gave, and the middleware does not run again."
 * And the promise: a replay answers the first answer.
 *
 * Control (passes): the key once, then retried in another request (the stored output, read
 * from the answer, holds the tags).
 *
 * Severity: medium (a wrong answer with no error, in the same response as the right one; the
 * work is done once, and a later retry answers right).
 *
 * Fails now: `b: { id, tags: [] }`.
 *
 * Suggested fix: for the key twice, answer the first call's output as the answer holds it
 * (its completed value, by path, from graphql-js's completed data, or the output re-read from
 * the first call's completed list), not the middleware's raw result; or, where the result is
 * an iterable that is not an array (a generator, an iterator), keep it as the array GraphQL
 * read (wrap it so the first completion collects its items, and answer those again).
 *
 * Fixed: a middleware's list given as a one-shot iterable is read into an array once, before
 * GraphQL completes it (`readList`, lib/graphql/completed-output.ts, from the wrapper in
 * lib/graphql/middleware-outputs.ts): GraphQL reads the array, and the key met again answers it
 * too.
 */
let pool: Pool;

/** Nest's field middleware: each tag in capitals, lazily (a generator GraphQL iterates). */
const upperTags: FieldMiddleware = async (_ctx, next) => {
  const tags = (await next()) as string[];
  return (function* () {
    for (const tag of tags) yield tag.toUpperCase();
  })();
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { middleware: [upperTags] })
  tags!: string[];
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  async createOrder(@Args('idempotencyKey') _key: string): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, tags: ['gift', 'express'] };
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

describe('adversary 82: the key twice in one operation, a middleware that yields its list', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_gql_mw_twice_gen', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  it('control: the key once, then retried', async () => {
    const query = 'mutation { a: createOrder(idempotencyKey: "adv82-gen-ok") { id tags } }';
    const first = await post(query);
    expect(first.body).toEqual({
      data: { a: { id: expect.any(Number), tags: ['GIFT', 'EXPRESS'] } },
    });
    const again = await post(query);
    expect(again.body).toEqual({ ...first.body, extensions: { idempotency: { replayed: ['a'] } } });
  });

  it('the key twice in one operation: both calls answer the tags', async () => {
    const res = await post(
      'mutation { a: createOrder(idempotencyKey: "adv82-gen-twice") { id tags } ' +
        'b: createOrder(idempotencyKey: "adv82-gen-twice") { id tags } }',
    );
    const id = res.body.data?.a?.id;
    expect(res.body).toEqual({
      data: {
        a: { id: expect.any(Number), tags: ['GIFT', 'EXPRESS'] },
        // Fails: b: { id, tags: [] }.
        b: { id, tags: ['GIFT', 'EXPRESS'] },
      },
      extensions: { idempotency: { replayed: ['b'] } },
    });
  });
});
