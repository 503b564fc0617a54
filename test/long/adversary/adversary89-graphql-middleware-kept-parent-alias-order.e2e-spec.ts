import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
  GraphQLModule,
  ID,
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
 * Adversary 89 (graphql): adversary 86's kept parent ID, under two aliases. Inside a
 * field-middleware output (`Order.customer`), one object field (`Customer.row: Row`, `Row {
 * @Field(() => ID) id: number }`) selected under two aliases, only one of which selects a
 * `@ResolveField()` that reads the parent's numeric key (`nextSeat: row.id + 1`). With that
 * alias first the replay is the first answer; with the other alias first
 * (`b: row { id name } a: row { id nextSeat }`) the replay's resolver reads `id: "7"` (ID's
 * wire form) and answers `nextSeat: 71` where the first answer said `8`.
 *
 * User code: `@Field(() => Customer, { middleware: [visible] }) customer` on Order; `Customer {
 * row: Row }`; `@ResolveField(() => Int) nextSeat(@Parent() row) { return row.id + 1 }`;
 * `createOrder` with `@Idempotent()`; Apollo on Express.
 *
 * Code path: lib/graphql/middleware-outputs.ts `outputValue` rebuilds each alias's stored
 * object on its own: `a`'s (a kept parent: `id` kept as the raw `7` by
 * lib/graphql/kept-member.ts `keepsOwnMember`), `b`'s (no kept data: `id` through
 * `ID.parseValue("7")`, the string); lib/graphql/merged-aliases.ts `mergedAnswers(first,
 * second)` then keeps `first`'s value of every field both hold ("otherwise the first"), and
 * `first` is the alias asked first: `b`'s `"7"` wins over the kept `7`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a selected leaf GraphQL writes from the
 * kept value as the answer holds it (a numeric key exposed as `ID`: the resolver reads `7`,
 * not the answer's `"7"`) ... keep the kept value"; and the replay answers the first answer.
 *
 * Severity: high: the replay of a committed order answers other data than the first answer
 * (a wrong seat number), silently, for nothing more than the order of two aliases.
 *
 * Fails now (unskip the it.skip and run this file): replay `a.nextSeat: 71` (first answer `8`).
 * Control (passes): the same aliases with the resolver's alias first.
 *
 * Suggested fix: in `mergedAnswers` (or before it, in `outputValue`), let a kept parent's own
 * data win over another alias's rebuilt leaf: merge the kept alias's value last, or rebuild
 * every alias group over the same kept data (the parents at each alias's key, whichever was
 * kept), so that the merged value holds what the resolver read at the first answer.
 *
 * Fixed (session of 2026-12-06, third): a property selected under several aliases is one
 * object, so each alias's stored value is rebuilt over the own data kept at any of them
 * (lib/graphql/alias-parents.ts `sharedParents`, used by `outputValue` in
 * lib/graphql/middleware-outputs.ts): `b`'s `id` is the kept `7` too (it writes `"7"`, as
 * the answer did), and the merge holds the kept value whichever alias comes first.
 */
let pool: Pool;

/** Nest's field middleware: the customer as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const customer = (await next()) as Customer;
  return { ...customer };
};

@ObjectType()
class Row {
  @Field(() => ID)
  id!: number;

  @Field()
  name!: string;
}

@ObjectType()
class Customer {
  @Field()
  name!: string;

  @Field(() => Row)
  row!: Row;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Customer, { middleware: [visible] })
  customer!: Customer;
}

@Resolver(() => Row)
class RowResolver {
  @ResolveField(() => Int)
  nextSeat(@Parent() row: Row): number {
    return row.id + 1;
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
    return { id: rows[0].id, customer: { name: 'Ada', row: { id: 7, name: 'G' } } };
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
  providers: [OrdersResolver, RowResolver],
})
class OrdersModule {}

describe('adversary 89: a kept parent under two aliases inside a middleware output', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv89_gql_mw_kept_alias', {
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

  const replayOf = async (key: string, query: string) => {
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.errors).toBeUndefined();
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: the alias with the resolver first: the replay is the first answer', async () => {
    await replayOf(
      'adv89-kept-alias-first',
      'mutation { createOrder { id customer { a: row { id nextSeat } b: row { id name } } } }',
    );
  });

  it('the alias without the resolver first: the replay is the first answer', async () => {
    await replayOf(
      'adv89-kept-alias-second',
      'mutation { createOrder { id customer { b: row { id name } a: row { id nextSeat } } } }',
    );
  });
});
