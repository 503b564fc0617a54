import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
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
 * Fixed (session of 2026-12-06 fifth): lib/graphql/run-field.ts `completing()` leaves
 * out, where the completed answer is over `maxResponseBytes`, the outputs' parents first and
 * then the value's own kept data (`__parent`, with `parentDataWithin` at the places the
 * library wrote it), largest first, before it gives up the outputs; said in the log only once
 * the answer is under the limit.
 *
 * Adversary 93 (graphql): the own data kept for a `@ResolveField()` a retry may add
 * (`__parent`, round 90) crowds the field-middleware outputs out of the stored answer, where
 * leaving that data out (as the docs say is done) would have stored them.
 *
 * User code: `Order { id, label (@Field({ middleware: [shown] })), customer: Customer }`,
 * `Customer { name, bio }` with a `@ResolveField() greeting` the operation does not select;
 * the mutation returns the customer row with a 40 kB `bio` no client selects and a 40 kB
 * label; `maxResponseBytes: 64 * 1024`; Apollo on Express. The operation:
 * `mutation { createOrder { id label customer { name } } }` (a ~40 kB answer: under the limit).
 *
 * Code path: lib/graphql/wire-value.ts (`hasAppField(Customer)` -> parent-keeping.ts
 * `unselected: 'parent'`: the whole `bio` in `__parent`); lib/graphql/run-field.ts: the first
 * write (`pending`, no outputs yet) fits with `__parent`, so `parentDataWithin` leaves nothing
 * out; at the answer hook, `completing()` adds the outputs, is over the limit, trims only
 * `outputs.parents` (`parentsWithin`), never the `__parent` in `wire`, and then stores
 * `outputsLost: true`. Every replay answers `label` `field_output_pending`.
 *
 * Docs (docs/guides/graphql.md, "What the resolvers under it read"): "Where that data would
 * take the stored answer past the route's `maxResponseBytes` (a large column no client
 * selects), the largest `__parent`s are left out, as few as bring it under ... the mutation's
 * work is not rolled back for them"; "an unselected large field does not count against
 * `maxResponseBytes`"; and for the outputs: "That kept data does not make the outputs too large
 * to store".
 *
 * Severity: high (a wrong stored answer: the order committed once, but every replay answers
 * `data: null` where the first answer gave the order; an unselected column decides it).
 *
 * Fails now (unskip the it.skip): the replay is `{ errors: [{ path: ["createOrder","label"],
 * extensions: { code: "field_output_pending" } }], data: null, extensions: { idempotency:
 * { replayed: ["createOrder"] } } }`; the first answer was `{ data: { createOrder: { id, label,
 * customer: { name: "Ada" } } } }`.
 * Control (passes): the same app and operation with a 10-byte `bio`: the replay is the first
 * answer.
 *
 * Suggested fix: in `completing()` (run-field.ts), when the completed answer is over the
 * limit, leave out `__parent` members of `wire` too (`parentDataWithin(wire, PARENT, over)`,
 * with `outputs.parents`, largest first) before giving up the outputs.
 */
let pool: Pool;
let bioLength = 40_000;

/** Nest's field middleware: the label as the caller may see it (here: as given). */
const shown: FieldMiddleware = async (_ctx, next) => next();

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

  @Field({ middleware: [shown] })
  label!: string;

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
    return {
      id: rows[0].id,
      label: 'L'.repeat(40_000),
      customer: { name: 'Ada', bio: 'b'.repeat(bioLength) },
    };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, maxResponseBytes: 64 * 1024 }),
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

describe('adversary 93: kept parent data crowds the middleware outputs out', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv93_gql_parent_crowds', {
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

  const operation = 'mutation { createOrder { id label customer { name } } }';

  const replayed = async (key: string) => {
    const first = await post(key, operation);
    expect(first.body.errors).toBeUndefined();
    const again = await post(key, operation);
    const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders');
    return { first: first.body, again: again.body, orders: rows[0].n };
  };

  it('control: a short bio: the replay answers the first answer', async () => {
    bioLength = 10;
    const { first, again } = await replayed('adv93-crowd-short');
    expect(again).toEqual({ ...first, extensions: { idempotency: { replayed: ['createOrder'] } } });
  });

  it('a large unselected bio: the replay answers the first answer', async () => {
    bioLength = 40_000;
    const { first, again } = await replayed('adv93-crowd-long');
    expect(again.errors).toBeUndefined();
    expect(again).toEqual({ ...first, extensions: { idempotency: { replayed: ['createOrder'] } } });
  });
});
