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
 * Fixed (session of 2026-12-07): the parent's kept data holds the list's shape beside the answer
 * (its holes' indexes, with its own members and kind: lib/graphql/list-shapes.ts `listShape`), and
 * a replay builds the list rebuilt from the answer through it (`shapedList`, wire-value.ts
 * `fromWire`), so the hole is a hole again, which `reduce` skips as at the first call.
 *
 * Adversary 115 (graphql; read-through of adversary 114's sparse-list fix, completed-items.ts):
 * a selected list field with a hole (lines placed by their position, `lines[line.position] =
 * line`, position 1 not loaded) on a type with a `@ResolveField()` that sums the lines with
 * `reduce` (which skips holes, as `forEach`, `some`, `filter` do). Without the library, and at
 * the library's first call (the sparse list is given to the resolver as it is), `units` is 5.
 * On a replay the resolver's parent holds the list rebuilt from the stored answer, whose hole
 * GraphQL wrote `null`: `reduce` meets `null` and throws, and as `units` is non-null the replay
 * answers `data: null` with "Cannot read properties of null (reading 'qty')" for a committed
 * mutation whose first call answered the order with `units: 5`.
 *
 * User code: `@ObjectType() class Order { @Field(() => Int) id; @Field(() => [Line], {
 * nullable: 'items' }) lines: Line[] }`; the mutation fills `lines[l.position] = l`;
 * `@ResolveField(() => Int) units(@Parent() o) { return o.lines.reduce((s, l) => s + l.qty,
 * 0) }`; the client selects `{ id lines { id } units }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (list: `completedItems` walks the hole as
 * `undefined`, the wire holds `null`; the list is given to the first answer as it is) and
 * `fromWire` (the replay's parent holds the list rebuilt from the wire items, `null` at the
 * hole; list-members.ts `withListMembers` gives back its non-item members, never its holes).
 *
 * Docs quote (docs/guides/graphql.md): "a list's holes are answered `null`, as GraphQL answers
 * them"; "A replay's resolvers get the same values as the first call's"; "an array's holes
 * and own members that are no items ... come back" (said of own data kept under `__parent`).
 *
 * Severity: high (a committed mutation's replay answers otherwise than the first answer:
 * `data: null` and an error where the first call answered the order).
 *
 * Fails now (un-skipped): plain and first `{"data":{"placeOrder":{"lines":[{"id":1},null,
 * {"id":3}],"units":5}}}`; replay `{"errors":[{"message":"Cannot read properties of null
 * (reading 'qty')",...,"path":["placeOrder","units"],...}],"data":null,"extensions":
 * {"idempotency":{"replayed":["placeOrder"]}}}`.
 *
 * Controls: the same list dense (no hole) answers 5 at the first call and on the replay.
 *
 * Suggested fix: keep a selected list's holes beside the answer (as its non-item members are
 * kept, list-members.ts: the indexes that were holes) and make them holes again in the list a
 * replay's parent holds; or state that a replay's resolvers read a hole as `null`.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  qty!: number;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line], { nullable: 'items' })
  lines!: Line[];
}

const place = async (sparse: boolean): Promise<Order> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const loaded = sparse
    ? [
        { id: 1, qty: 2, position: 0 },
        { id: 3, qty: 3, position: 2 },
      ]
    : [
        { id: 1, qty: 2, position: 0 },
        { id: 3, qty: 3, position: 1 },
      ];
  const lines: Line[] = [];
  for (const { position, ...line } of loaded) lines[position] = line;
  return { id: rows[0].id, lines };
};

@Resolver(() => Order)
class OrdersResolver {
  @ResolveField(() => Int)
  units(@Parent() order: Order): number {
    return order.lines.reduce((sum, line) => sum + line.qty, 0);
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async placeOrder(@Args('sparse') sparse: boolean): Promise<Order> {
    return place(sparse);
  }

  @Mutation(() => Order)
  async placeOrderPlain(@Args('sparse') sparse: boolean): Promise<Order> {
    return place(sparse);
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

describe("adversary 115: a selected list's hole is null for a replay's resolver", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv115_gql_sparse_reduce', {
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
    const sel = `(sparse: ${sparse}) { lines { id } units }`;
    const plain = await post(`mutation { placeOrderPlain${sel} }`);
    const first = await post(`mutation { placeOrder${sel} }`, key);
    const again = await post(`mutation { placeOrder${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('SPARSE REDUCE', sparse, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: a dense list answers as without the library, and replays', async () => {
    const { plain, first, again } = await three(false, 'adv115-sparse-ctl');
    expect(plain.body.data.placeOrderPlain).toEqual({ lines: [{ id: 1 }, { id: 3 }], units: 5 });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.placeOrder)).toBe(
      JSON.stringify(plain.body.data.placeOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it("a sparse list's resolver reads on a replay what it read at the first call", async () => {
    const { plain, first, again } = await three(true, 'adv115-sparse');
    expect(plain.body.data.placeOrderPlain).toEqual({
      lines: [{ id: 1 }, null, { id: 3 }],
      units: 5,
    });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.placeOrder)).toBe(
      JSON.stringify(plain.body.data.placeOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
