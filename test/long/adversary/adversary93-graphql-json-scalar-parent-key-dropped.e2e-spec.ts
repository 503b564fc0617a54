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
import { GraphQLScalarType } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-06 fifth): lib/graphql/wire-value.ts notes the wire objects it
 * writes `__parent` into (`StoredValue.parents`) and lib/graphql/parent-data-within.ts leaves
 * out only at those objects (the original and its copy walked side by side, by identity),
 * never a member of that name in a JSON scalar's value; run-field.ts passes them.
 *
 * Adversary 93 (graphql): leaving the kept parents' data out for `maxResponseBytes` deletes
 * the app's own data: every member named `__parent` anywhere in the stored answer, a JSON
 * scalar's value included, is taken for the library's kept parent data.
 *
 * User code: the usual hand-written JSON scalar (`serialize: (v) => v`); `Order { id, meta:
 * JSON, customer: Customer }` where `meta` is a document the app stores as the client sent it
 * (a form builder's tree, whose nodes link up with `__parent`, 14 kB); `Customer` has a
 * `@ResolveField() bioLength` (not selected) and a row with an 8 kB `bio` no client selects;
 * `maxResponseBytes: 20_000`; Apollo on Express. The same operation twice:
 * `mutation { createOrder { id meta customer { name } } }`.
 *
 * Code path: lib/graphql/run-field.ts: the answer (with the customer's `__parent`, round 90)
 * is over the limit, so `parentDataWithin(wire, PARENT, over)`
 * (lib/graphql/parent-data-within.ts) walks the whole wire value, leaves included, and deletes
 * the largest member named `__parent`: the one inside `meta`, the JSON scalar's value, not the
 * library's. The stored answer is then `meta` without it, the customer's own data kept.
 *
 * Docs (docs/guides/graphql.md, "What the resolvers under it read"): "Where that data would
 * take the stored answer past the route's `maxResponseBytes` (a large column no client
 * selects), the largest `__parent`s are left out, as few as bring it under ... a replay's
 * resolvers then read those parents as the answer holds them"; "The answers are the same bytes
 * when the operation is".
 *
 * Severity: high (a wrong stored answer, with no error and nothing said: the log says a
 * parent's data was left out), though it needs a `__parent` key in the app's JSON.
 *
 * Fails now (unskip the it.skip): the first answer's `meta` is `{ x: 1, __parent: { note:
 * "nnn…" } }`, every replay's `{ x: 1 }`.
 * Control (passes): the same app and operation, a short `bio` and `note` (under the limit):
 * the replay is the first answer.
 *
 * Suggested fix: walk only the places the library wrote `__parent` (the wire's objects along
 * the selection, not a scalar's value), e.g. note the holders while writing the wire
 * (wire-value.ts) and pass them to `parentDataWithin`; or key the kept data by a member no
 * app data can hold (a Symbol is not JSON: a sibling map of paths, as `outputs.parents`).
 */
let pool: Pool;
let bioLength = 10;
let noteLength = 10;

const JSONScalar = new GraphQLScalarType({
  name: 'JSON',
  serialize: (value) => value,
  parseValue: (value) => value,
});

@ObjectType()
class Customer {
  @Field()
  name!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => JSONScalar)
  meta!: unknown;

  @Field(() => Customer)
  customer!: Customer;
}

@Resolver(() => Customer)
class CustomerFields {
  @ResolveField(() => Int)
  bioLength(@Parent() customer: { bio?: string }): number {
    return customer.bio?.length ?? 0;
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
      meta: { x: 1, __parent: { note: 'n'.repeat(noteLength) } },
      customer: { name: 'Ada', bio: 'b'.repeat(bioLength) } as Customer,
    };
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

describe('adversary 93: a JSON scalar member named __parent, left out for maxResponseBytes', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv93_gql_json_parent_key', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query: 'mutation { createOrder { id meta customer { name } } }' }));

  const replayedAsFirst = async (key: string) => {
    const first = await post(key);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createOrder.meta.__parent.note).toHaveLength(noteLength);
    const again = await post(key);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: a short bio and note: the replay answers the first answer', async () => {
    bioLength = 10;
    noteLength = 10;
    await replayedAsFirst('adv93-json-parent-short');
  });

  it('a 14 kB note and an 8 kB bio: the replay answers the first answer', async () => {
    bioLength = 8_000;
    noteLength = 14_000;
    await replayedAsFirst('adv93-json-parent-long');
  });
});
