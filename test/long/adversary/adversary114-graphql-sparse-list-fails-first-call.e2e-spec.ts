import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
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
 * Fixed (session of 2026-12-07): wire-value.ts `walkValue` walks a list's items as GraphQL
 * completes them, every index to its `length` with a hole read as `undefined` (answered
 * `null`), through `completedItems` (lib/graphql/completed-items.ts), not `list.map`, which
 * skipped the hole and left `undefined` among the walked items.
 *
 * Adversary 114 (graphql; array members of this session, list-members.ts, typed-graph.ts): a
 * selected list field whose array has a HOLE (`codes[2] = 'c'` after `codes[0]`, as code that
 * fills an array by index writes it) on a type with a `@ResolveField()`. GraphQL answers the
 * hole as `null` (the list's items are nullable). With `@Idempotent()` the FIRST call already
 * answers `data: null` with the library's own TypeError, "Cannot read properties of undefined
 * (reading 'value')", at the mutation's path; the mutation's work is committed (the row is
 * inserted), and every replay answers the same error. Dense arrays (the control) answer as
 * without the library; a hole in the selected object list `lines` fails alike (seen in the
 * review's scratch runs: `lines[2] = { id: 3 }` after `lines[0]`).
 *
 * User code: `@ObjectType() class Order { @Field(() => Int) id; @Field(() => [String],
 * { nullable: 'items' }) codes }` with `@ResolveField(() => Int) codeCount(@Parent() order) {
 * return order.codes.length }`; `@Mutation(() => Order) @Idempotent() importOrder(sparse)`
 * returning `{ id, codes }` where `codes = ['a']; codes[2] = 'c'`; the client selects
 * `{ id codes codeCount }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue`, the list branch: `list.map(...)` skips the
 * hole, `Promise.all` of that sparse array gives `undefined` at its index, and
 * `items.every((item, i) => item.value === list[i])` (line 557) reads `.value` of `undefined`
 * (the stack trace Apollo gives with `includeStacktraceInErrorResponses`). It fails alike
 * where the client does not select `codeCount`.
 *
 * Docs quote (docs/guides/graphql.md): "an array's holes and own members that are no items ...
 * come back, enumerable or not as they were"; the promise: the first answer is what the app
 * answers without the library, and bad input loses nothing.
 *
 * Severity: high (the first answer differs from the app's own: `data: null` and an internal
 * error for a committed mutation the app answers fine; replays repeat it).
 *
 * Fails now (un-skipped): without the library `{"id":..,"codes":["a",null,"c"],"codeCount":3}`;
 * with it, first call and replay, `{"errors":[{"message":"Cannot read properties of undefined
 * (reading 'value')","path":["importOrder"],...}],"data":null}`.
 *
 * Controls: the same order with a dense array (`['a', 'b', 'c']`) answers as without the
 * library and replays the same bytes.
 *
 * Suggested fix: walk a list's items as GraphQL completes them (`Array.from(list, ...)` or a
 * `for` over `0..length`, a hole read as `undefined`), not `list.map`, which skips holes; test
 * a sparse list (selected, of scalars and of objects) under `@Idempotent()`.
 */
let pool: Pool;

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { nullable: 'items' })
  codes!: (string | null)[];
}

const build = async (sparse: boolean): Promise<Order> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const codes: string[] = ['a'];
  if (sparse) codes[2] = 'c';
  else codes.push('b', 'c');
  return { id: rows[0].id, codes };
};

@Resolver(() => Order)
class OrdersResolver {
  @ResolveField(() => Int)
  codeCount(@Parent() order: Order): number {
    return order.codes.length;
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async importOrder(@Args('sparse') sparse: boolean): Promise<Order> {
    return build(sparse);
  }

  @Mutation(() => Order)
  async importOrderPlain(@Args('sparse') sparse: boolean): Promise<Order> {
    return build(sparse);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      includeStacktraceInErrorResponses: true,
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 114: a sparse selected list fails the first call', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv114_gql_sparse_list', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string, key?: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(60_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send(JSON.stringify({ query }));
  };

  const three = async (sparse: boolean, key: string) => {
    const sel = '{ codes codeCount }';
    const plain = await post(`mutation { importOrderPlain(sparse: ${sparse}) ${sel} }`);
    const first = await post(`mutation { importOrder(sparse: ${sparse}) ${sel} }`, key);
    const again = await post(`mutation { importOrder(sparse: ${sparse}) ${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('SPARSE', sparse, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: a dense list answers as without the library, and replays', async () => {
    const { plain, first, again } = await three(false, 'adv114-sparse-ctl');
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.importOrder)).toBe(
      JSON.stringify(plain.body.data.importOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a list with a hole answers as without the library, and replays (round 114: found by review)', async () => {
    const { plain, first, again } = await three(true, 'adv114-sparse');
    expect(plain.body.data.importOrderPlain).toEqual({ codes: ['a', null, 'c'], codeCount: 3 });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.importOrder)).toBe(
      JSON.stringify(plain.body.data.importOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
