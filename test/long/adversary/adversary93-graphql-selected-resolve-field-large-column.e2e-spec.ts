import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  GraphQLModule,
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
 * Fixed (session of 2026-12-06 fifth): lib/graphql/parent-keeping.ts says `'parent'` for
 * the unselected data of an object with a selected app field (`'kept'` only under
 * class-transformer), so it is left out as `__parent` is; what the selected resolver reads of
 * its own name and the fields whose wire form would change stay in `__kept`.
 *
 * Adversary 93 (graphql): selecting a small `@ResolveField()` makes a mutation fail for good.
 * Its parent's unselected large column is then kept in `__kept`, which is never left out for
 * `maxResponseBytes` (only `__parent` is, since round 90): the answer of a few dozen bytes is
 * refused with `response_too_large` and the order rolled back. The same operation without that
 * field is stored (the column, in `__parent`, left out) and answers.
 *
 * User code: `Order { id, customer: Customer }`, `Customer { name, bio }` (`bio` a 30 kB text
 * field, a profile no client of this screen selects), `@ResolveField() greeting(@Parent() c)`
 * returning `Hello, ${c.name}`; `createOrder` with `@Idempotent()`; `maxResponseBytes: 20_000`
 * (the default 1 MiB with a 1.2 MB column is the same); Apollo on Express. The client sends
 * `mutation { createOrder { id customer { name greeting } } }`.
 *
 * Code path: lib/graphql/wire-value.ts `walkObject` -> lib/graphql/parent-keeping.ts
 * `parentKeeping({ selectsAppField: true })` -> `unselected: 'kept'` ("`KEPT` (never left
 * out)"): `bio` goes to `__kept`; lib/graphql/run-field.ts `parentDataWithin(wire, PARENT,
 * over)` finds no `__parent` to leave out; `answer.body.length > route.maxResponseBytes` ->
 * `IdempotencyResponseTooLargeError`, the work rolled back.
 *
 * Docs (docs/guides/graphql.md): "an unselected large field does not count against
 * `maxResponseBytes`"; "for those with one, the stored answer holds their objects' whole own
 * data. Where that data would take the stored answer past the route's `maxResponseBytes` (a
 * large column no client selects), the largest `__parent`s are left out, as few as bring it
 * under, and the app's log says so ... the mutation's work is not rolled back for them."
 *
 * Severity: high (a lost effect: the order rolled back, `response_too_large` stored and
 * replayed for ever under the key, for an answer of ~70 bytes the app gives without the
 * library; and whether it happens hangs on whether the client selects `greeting`).
 *
 * Fails now (unskip the it.skip): `{ errors: [{ path: ["createOrder"], extensions: { code:
 * "response_too_large", status: 500 } }], data: null }`, no order row.
 * Control (passes): the same app and row, the client selecting `customer { name }`: answered,
 * replayed the same, one order.
 *
 * Suggested fix: keep the unselected own data of an object with a selected app field in
 * `PARENT` too (left out, largest first, where over the limit), keeping in `KEPT` only what the
 * stored fields would not give back; `parentKeeping` would then say 'parent' for
 * `selectsAppField` as for `hasAppField`.
 */
let pool: Pool;

@ObjectType()
class Customer {
  @Field()
  name!: string;

  @Field()
  bio!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Customer)
  customer!: Customer;
}

@Resolver(() => Customer)
class CustomerFields {
  @ResolveField(() => String)
  greeting(@Parent() customer: Customer): string {
    return `Hello, ${customer.name}`;
  }
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, customer: { name: 'Ada', bio: 'b'.repeat(30_000) } };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, maxResponseBytes: 20_000 }),
    }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [OrdersResolver, CustomerFields],
})
class OrdersModule {}

describe('adversary 93: a selected @ResolveField() over a parent with a large unselected column', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv93_gql_selected_rf_large', {
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

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders')).rows[0].n;

  const answered = async (key: string, selection: string, customer: object) => {
    const before = await count();
    const query = `mutation { createOrder { id customer { ${selection} } } }`;
    const first = await post(key, query);
    expect(first.body).toEqual({ data: { createOrder: { id: expect.any(Number), customer } } });
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
    expect(await count()).toBe(before + 1);
  };

  it('control: the client selects customer { name }: answered, replayed, one order', async () => {
    await answered('adv93-sel-rf-name', 'name', { name: 'Ada' });
  });

  it('the client selects customer { name greeting }: answered, replayed, one order', async () => {
    await answered('adv93-sel-rf-greeting', 'name greeting', {
      name: 'Ada',
      greeting: 'Hello, Ada',
    });
  });
});
