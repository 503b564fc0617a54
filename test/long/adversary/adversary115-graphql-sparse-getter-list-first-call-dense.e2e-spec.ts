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
 * Fixed (session of 2026-12-07): the first call's list of item views is built through the list's
 * shape as a replay's is (lib/graphql/list-shapes.ts `listShape`/`shapedList`, called by
 * wire-value.ts `walkValue`): an index that was a hole stays one, never an own `undefined`.
 *
 * Adversary 115 (graphql; read-through of adversary 114's sparse-list fix, completed-items.ts):
 * the list with a hole of adversary115-graphql-sparse-list-resolver-reads-null, its lines now
 * entity class instances with a getter field (`Line`'s `sku`, computed), as an ORM's entities
 * have. `completedItems` walks every index, the hole as `undefined`; a line with a getter
 * comes back as its Proxy, so the list is not "the same" and the FIRST call's parent is given
 * `items.map((item) => item.value)`: a DENSE array with `undefined` at the hole. The
 * `@ResolveField()` that sums with `reduce` (which skips a hole, never an `undefined`) throws
 * "Cannot read properties of undefined (reading 'qty')" at the first call, where the app
 * answers 5: the non-null `units` nulls the mutation's field, `data: null` for a committed
 * order; the replay reads `null` there and fails with another message. (With plain objects as lines the first call is given the
 * sparse list as it is and answers 5: the control.)
 *
 * User code: `@ObjectType() class Line { constructor(id, qty) {...} @Field(() => Int) id;
 * @Field() get sku() { return `SKU-${this.id}` } }`; `@ObjectType() class Order { @Field(() =>
 * Int) id; @Field(() => [Line], { nullable: 'items' }) lines: Line[] }`; the mutation fills
 * `lines[l.position] = new Line(...)`; `@ResolveField(() => Int) units(@Parent() o) { return
 * o.lines.reduce((s, l) => s + l.qty, 0) }`; the client selects `{ lines { id sku } units }`;
 * Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue`, list branch: `completedItems(list, ...)`
 * (dense), `same = ... && items.every((item, i) => item.value === list[i])` false (a line's
 * Proxy), `value: items.map((item) => item.value)`: the hole becomes an own `undefined`.
 *
 * Docs quote (docs/guides/graphql.md): "a list's holes are answered `null`, as GraphQL answers
 * them"; "The first call gets the resolver's own value"; "the resolver's value is not changed:
 * the first answer is it, seen through a Proxy that answers those fields".
 *
 * Severity: high (the first answer of a committed mutation is `data: null` where the app
 * answers the order; the replay's bytes differ from the first answer's).
 *
 * Fails now (un-skipped): without the library `{"data":{"placeOrderPlain":{"lines":[{"id":1,
 * "sku":"SKU-1"},null,{"id":3,"sku":"SKU-3"}],"units":5}}}`; first call `{"errors":[{"message":
 * "Cannot read properties of undefined (reading 'qty')",...,"path":["placeOrder","units"],...}],
 * "data":null}`; replay `{"errors":[{"message":"Cannot read properties of null (reading
 * 'qty')",...}],"data":null,...}`: not even the first answer's bytes (`undefined` at the first
 * call, `null` on the replay: adversary115-graphql-sparse-list-resolver-reads-null).
 *
 * Controls: the same sparse list of plain objects (no getter: the list is given as it is)
 * answers 5 at the first call, as without the library.
 *
 * Suggested fix: where the value is an array, build the first answer's list with its holes
 * kept (`new Array(list.length)` and assign only the indexes the list has), so the app's
 * resolvers read the list as they would without the library.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id: number;

  qty: number;

  constructor(id: number, qty: number) {
    this.id = id;
    this.qty = qty;
  }

  @Field()
  get sku(): string {
    return `SKU-${this.id}`;
  }
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line], { nullable: 'items' })
  lines!: Line[];
}

const place = async (entities: boolean): Promise<Order> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const loaded = [
    { id: 1, qty: 2, position: 0 },
    { id: 3, qty: 3, position: 2 },
  ];
  const lines: Line[] = [];
  for (const { position, id, qty } of loaded) {
    lines[position] = entities ? new Line(id, qty) : ({ id, qty, sku: `SKU-${id}` } as Line);
  }
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
  async placeOrder(@Args('entities') entities: boolean): Promise<Order> {
    return place(entities);
  }

  @Mutation(() => Order)
  async placeOrderPlain(@Args('entities') entities: boolean): Promise<Order> {
    return place(entities);
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

describe('adversary 115: a sparse list of getter objects is dense at the first call', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv115_gql_sparse_getters', {
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

  const three = async (entities: boolean, key: string) => {
    const sel = `(entities: ${entities}) { lines { id sku } units }`;
    const plain = await post(`mutation { placeOrderPlain${sel} }`);
    const first = await post(`mutation { placeOrder${sel} }`, key);
    const again = await post(`mutation { placeOrder${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('SPARSE GETTERS', entities, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: a sparse list of plain objects answers as without the library, and replays', async () => {
    const { plain, first, again } = await three(false, 'adv115-sparse-getters-ctl');
    expect(plain.body.data.placeOrderPlain).toEqual({
      lines: [{ id: 1, sku: 'SKU-1' }, null, { id: 3, sku: 'SKU-3' }],
      units: 5,
    });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.placeOrder)).toBe(
      JSON.stringify(plain.body.data.placeOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
  });

  it("a sparse list of getter objects reaches the first call's resolver with its hole", async () => {
    const { plain, first, again } = await three(true, 'adv115-sparse-getters');
    expect(plain.body.data.placeOrderPlain).toEqual({
      lines: [{ id: 1, sku: 'SKU-1' }, null, { id: 3, sku: 'SKU-3' }],
      units: 5,
    });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.placeOrder)).toBe(
      JSON.stringify(plain.body.data.placeOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
