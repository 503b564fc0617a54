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
 * Adversary 84 (graphql): a middleware field of object type selected under two aliases, each
 * with its own fields (`a: shipping { street } b: shipping { city }`), retried by a client
 * whose operation now selects the same fields under one name (`shipping { street city }`,
 * the next release of the app, or a cache that normalizes the query): the retry answers
 * `createOrder: null` with `field_not_stored` at `createOrder.shipping.city` ("was not
 * selected by the first call ... use a new key for a new operation"), though the first call
 * selected and stored `city` (under `b`).
 *
 * User code: `Order.shipping: Address { street city }` behind Nest's field middleware
 * `visible`; `createOrder` (nullable) with `@Idempotent()`; Apollo on Express.
 *
 * Code path: lib/graphql/output-paths.ts `outputAt` -> `storedKeyFor`: the retry's
 * `shipping` is looked up by its named key (`shipping`), which `names` points at the first
 * alias's output (`a`, holding `street` only); lib/graphql/middleware-outputs.ts
 * `outputValue` -> `storedSubkey` finds no `city` in it and answers `notStoredField`. The
 * other alias's stored output (`b`, with `city`) is never read.
 *
 * Docs (docs/guides/graphql.md): "A retry that selects the same fields (under other aliases,
 * through fragments, or fewer of them) gets the stored values. A retry that selects a field
 * the first call did not gets, for that field, an error"; "A retry that selects such a field
 * under another alias (or without the first call's alias) gets the first call's output of it".
 *
 * Severity: medium-high: an honest retry (the same fields, under other aliases) of a
 * committed order answers `createOrder: null` and an error telling it the field was never
 * selected and to use a new key: a client that follows it orders twice.
 *
 * Failed before the fix: `data: { createOrder: null }`, `field_not_stored` at `createOrder.shipping.city`
 * (see the failing test). Control (passes): the retry of the operation as first sent.
 *
 * Suggested fix: where a retry's field (by named key) has several stored outputs (each alias
 * of the first call), answer each field inside it from the output that holds it (merge the
 * aliases' outputs of one named key: they are one middleware's output of one parent, each
 * alias's selection of it), and refuse only a field none of them holds.
 *
 * Fixed (session of 2026-12-06, "graphql: a retry that groups one field's aliases otherwise"):
 * the stored output found for the retry's field carries the first call's other outputs of the
 * same named field (`OutputAt.others`, lib/graphql/output-paths.ts `outputAt`); each is rebuilt
 * with the retry's selection and merged in (`mergedAnswers`), so each selected field is read
 * from the alias that stored it, and only a field none of them holds is refused.
 */
let pool: Pool;

/** Nest's field middleware: the address as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const address = (await next()) as Address;
  return { ...address };
};

@ObjectType()
class Address {
  @Field()
  street!: string;

  @Field()
  city!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Address, { middleware: [visible] })
  shipping!: Address;
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
    return { id: rows[0].id, shipping: { street: 'Main St 1', city: 'Paris' } };
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

describe('adversary 84: one middleware field under two aliases, retried under one name', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv84_gql_mw_aliases_merged', {
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

  const replayed = { idempotency: { replayed: ['createOrder'] } };
  const FIRST = 'mutation { createOrder { id a: shipping { street } b: shipping { city } } }';

  const first = async (key: string) => {
    const answer = await post(key, FIRST);
    expect(answer.body).toEqual({
      data: {
        createOrder: { id: expect.any(Number), a: { street: 'Main St 1' }, b: { city: 'Paris' } },
      },
    });
    return answer.body.data.createOrder.id as number;
  };

  it('control: the retry the operation as first sent', async () => {
    const id = await first('adv84-aliases-same');
    const again = await post('adv84-aliases-same', FIRST);
    expect(again.body).toEqual({
      data: { createOrder: { id, a: { street: 'Main St 1' }, b: { city: 'Paris' } } },
      extensions: replayed,
    });
  });

  it('the retry selects the same fields under one name: each its stored value', async () => {
    const id = await first('adv84-aliases-merged');
    const again = await post(
      'adv84-aliases-merged',
      'mutation { createOrder { id shipping { street city } } }',
    );
    expect(again.body).toEqual({
      data: { createOrder: { id, shipping: { street: 'Main St 1', city: 'Paris' } } },
      extensions: replayed,
    });
  });
});
