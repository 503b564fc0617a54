import { isDeepStrictEqual } from 'node:util';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  GraphQLModule,
  InputType,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-06, seventh): kept parent data is now written as a typed graph
 * (lib/graphql/typed-graph.ts) whose object nodes say whether the object had a prototype (`'o'` or
 * `'O'`); `restoreData` rebuilds an object without one with `Object.create(null)`, its keys
 * defined in order.
 *
 * Adversary 103 (graphql): an object with no prototype in a parent's own data (not a field)
 * comes back on a replay as a plain object (`Object.prototype`), so a `@ResolveField()` that
 * tells them apart answers otherwise on every replay. Such objects are ordinary in a NestJS
 * GraphQL app: graphql-js coerces every input object argument into `Object.create(null)`
 * (graphql/execution/values.js, utilities/coerceInputValue.js, valueFromAST.js), and without a
 * `ValidationPipe({ transform: true })` Nest hands that very object to the resolver. A mutation
 * that returns its row with the input it was asked with (`{ ...row, input }`, for a field
 * resolver to read) keeps a null-prototype object under `__parent`.
 *
 * User code: `@InputType() class OrderInput { @Field() sku; @Field(() => Int) qty }`;
 * `@Mutation(() => Order) @Idempotent() placeOrder(@Args('input') input: OrderInput)` inserting
 * a row and returning `{ ...row, input }` (`input` is no field of `Order`);
 * `@ResolveField(() => Boolean) isDefault(@Parent() o) { return isDeepStrictEqual(o.input,
 * { sku: 'A', qty: 1 }) }` (node:util, which compares prototypes) and `@ResolveField(() =>
 * Boolean) hasNote(@Parent() o)` calling `o.input.hasOwnProperty('note')`; Apollo.
 *
 * Code path: lib/graphql/kept-data.ts `keepData` -> `plainCopy` copies every object that is
 * neither typed nor a Map/Set/array into `{}` (an `Object.prototype` object), whatever its
 * prototype, and superjson stores no prototype; `restoreData` gives that plain object to the
 * replay's resolvers (lib/graphql/wire-value.ts `fromWire`, `__parent`). `isDeepStrictEqual`
 * in `keepData` compares the copy with itself read back, never with the original, so the
 * member is not even named as unfaithful (no log line).
 *
 * Docs (docs/guides/graphql.md, "What the resolvers under it read, as they first read it"):
 * "Its own data that is not a field ... is kept too, under `__parent` (below), with its types
 * ... and any own key comes back an own key, in its order"; "A replay's resolvers get the same
 * values as the first call's, and the answer is the same bytes." Nothing says an object's
 * prototype is lost (only an instance of a class's methods and getters, which are logged).
 *
 * Severity: medium (a committed mutation's replay answers another value at a field resolver's
 * field, silently, every time; it takes a prototype-sensitive read: `isDeepStrictEqual`,
 * `assert.deepStrictEqual`, `obj.hasOwnProperty()` (throws at first, answers on a replay),
 * `Object.getPrototypeOf`, `'toString' in obj`, `String(obj)`).
 *
 * Fails now (unskip the it.skip): first `{"errors":[{"message":"order.input.hasOwnProperty is
 * not a function",...,"path":["placeOrder","hasNote"]}],"data":null}` (the mutation committed:
 * one row); every replay `{"data":{"placeOrder":{"id":2,"isDefault":true,"hasNote":false}},
 * "extensions":{"idempotency":{"replayed":["placeOrder"]}}}` (the first call's `isDefault` was
 * false: `isDeepStrictEqual` compares prototypes).
 * Control (passes): the same mutation returning a plain copy (`input: { ...input }`) replays
 * the first answer.
 *
 * Suggested fix: in `plainCopy`/`escapedCopy` mark an object whose prototype is null (a
 * superjson custom type, or a `nullProto` list of paths beside `keys: 1`) and have
 * `restoreData` rebuild it with `Object.create(null)` (keys defined in order); at least, have
 * `keepData` name such a member in `unfaithful` (so the app's log says so) and document it.
 */
let pool: Pool;

@InputType()
class OrderInput {
  @Field()
  sku!: string;

  @Field(() => Int)
  qty!: number;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;
}

interface OrderRow extends Order {
  input: OrderInput;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async placeOrder(@Args('input') input: OrderInput): Promise<OrderRow> {
    const { rows } = await pool.query<Order>(
      'INSERT INTO orders (sku, qty) VALUES ($1, $2) RETURNING id',
      [input.sku, input.qty],
    );
    return { ...rows[0], input };
  }

  @Mutation(() => Order)
  @Idempotent()
  async placePlainOrder(@Args('input') input: OrderInput): Promise<OrderRow> {
    const { rows } = await pool.query<Order>(
      'INSERT INTO orders (sku, qty) VALUES ($1, $2) RETURNING id',
      [input.sku, input.qty],
    );
    return { ...rows[0], input: { ...input } };
  }

  @ResolveField(() => Boolean)
  isDefault(@Parent() order: OrderRow): boolean {
    return isDeepStrictEqual(order.input, { sku: 'A', qty: 1 });
  }

  @ResolveField(() => Boolean)
  hasNote(@Parent() order: OrderRow): boolean {
    // eslint-disable-next-line no-prototype-builtins
    return order.input.hasOwnProperty('note');
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

describe('adversary 103: a null-prototype object in a parent s own data', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv103_gql_null_proto', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE orders (id serial PRIMARY KEY, sku text NOT NULL, qty int NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders')).rows[0].n;

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  it('control: a plain object in the parent s data replays the same answer', async () => {
    const query =
      'mutation { placePlainOrder(input: { sku: "A", qty: 1 }) { id isDefault hasNote } }';
    const before = await count();
    const firstAnswer = await post('adv103-null-proto-plain', query);
    const again = await post('adv103-null-proto-plain', query);
    expect(firstAnswer.body.data.placePlainOrder.isDefault).toBe(true);
    expect(again.body.data).toEqual(firstAnswer.body.data);
    expect(again.body.errors).toBeUndefined();
    expect(await count()).toBe(before + 1);
  });

  it('the replay answers what the first call did', async () => {
    const query = 'mutation { placeOrder(input: { sku: "A", qty: 1 }) { id isDefault hasNote } }';
    const before = await count();
    const firstAnswer = await post('adv103-null-proto', query);
    const again = await post('adv103-null-proto', query);
    // eslint-disable-next-line no-console
    console.log('NULL PROTO', firstAnswer.text, again.text);
    expect(again.body.data).toEqual(firstAnswer.body.data);
    expect(again.body.errors?.map((e: { message: string }) => e.message)).toEqual(
      firstAnswer.body.errors?.map((e: { message: string }) => e.message),
    );
    expect(await count()).toBe(before + 1);
  });
});
