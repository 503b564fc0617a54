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
 * wire-value.ts `walkValue`), which defines the list's own members that are no items (`total`) onto
 * it, as list-members.ts `withListMembers` does on a replay.
 *
 * Adversary 115 (graphql; read-through of adversary 112's list members, list-members.ts, with
 * the list's items answered through Proxies).
 *
 * User code: a repository returns a page of lines with its count on the page itself
 * (`Object.defineProperty(lines, 'total', { value: 43 })`), the lines entity class instances
 * with a getter field (`@Field() get sku() { return `SKU-${this.id}` }`); `@ObjectType() class
 * Order { @Field(() => Int) id; @Field(() => [Line]) lines: Line[] }`; `@ResolveField(() => Int,
 * { nullable: true }) lineTotal(@Parent() order) { return order.lines.total }`; the client
 * selects `{ lines { id sku } lineTotal }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue`, list branch: an item with a getter field
 * comes back as its Proxy, so `same` is false and the first answer's parent is given
 * `items.map((item) => item.value)`, a new Array with the items only: the page's own `total`
 * is not on it. The replay's parent gets the list rebuilt from the answer with its members
 * given back (`listMembers` kept under `__parent`, `withListMembers` in `fromWire`): `total`
 * 43. So the first call's resolver reads `undefined` and the replay's 43.
 *
 * Docs quote (docs/guides/graphql.md): "a selected list field's own members that are no items
 * (`order.lines.total` under a selected `lines { id }`, whose answer holds the items only) are
 * kept too and defined again onto the list a replay rebuilds from the answer"; "the resolver's
 * value is not changed: the first answer is it, seen through a Proxy"; "A replay's resolvers
 * get the same values as the first call's".
 *
 * Severity: high (the replay answers otherwise than the first answer: `lineTotal` null at the
 * first call, 43 on the replay; the first answer is not the app's, 43).
 *
 * Fails now (un-skipped): without the library `{"lines":[{"id":1,"sku":"SKU-1"},{"id":2,"sku":
 * "SKU-2"}],"lineTotal":43}`; first call `{"data":{"placeOrder":{"lines":[...],"lineTotal":
 * null}}}`; replay `{"data":{"placeOrder":{"lines":[...],"lineTotal":43}},"extensions":
 * {"idempotency":{"replayed":["placeOrder"]}}}`.
 *
 * Controls: the same page of plain lines (no getter: the list is given as it is) answers 43 at
 * the first call and on the replay.
 *
 * Suggested fix: where the first answer's list is made anew (its items answered through
 * Proxies), give it the list's own members that are no items too (`withListMembers(made,
 * listMembers(list))`, as a replay does), and its holes (see
 * adversary115-graphql-sparse-getter-list-first-call-dense); or answer the list itself through
 * a Proxy whose items are the views.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id: number;

  constructor(id: number) {
    this.id = id;
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

  @Field(() => [Line])
  lines!: Line[];
}

const place = async (entities: boolean): Promise<Order> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const lines: Line[] = entities
    ? [new Line(1), new Line(2)]
    : ([
        { id: 1, sku: 'SKU-1' },
        { id: 2, sku: 'SKU-2' },
      ] as Line[]);
  Object.defineProperty(lines, 'total', { value: 43 });
  return { id: rows[0].id, lines };
};

@Resolver(() => Order)
class OrdersResolver {
  @ResolveField(() => Int, { nullable: true })
  lineTotal(@Parent() order: Order): number | undefined {
    return (order.lines as Line[] & { total?: number }).total;
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

describe('adversary 115: a page of getter objects loses its total at the first call', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv115_gql_getter_items_member', {
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
    const sel = `(entities: ${entities}) { lines { id sku } lineTotal }`;
    const plain = await post(`mutation { placeOrderPlain${sel} }`);
    const first = await post(`mutation { placeOrder${sel} }`, key);
    const again = await post(`mutation { placeOrder${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('PAGE TOTAL', entities, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: a page of plain lines keeps its total at the first call and on a replay', async () => {
    const { plain, first, again } = await three(false, 'adv115-page-total-ctl');
    expect(plain.body.data.placeOrderPlain.lineTotal).toBe(43);
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.placeOrder)).toBe(
      JSON.stringify(plain.body.data.placeOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it("a page of getter objects keeps its total for the first call's resolver", async () => {
    const { plain, first, again } = await three(true, 'adv115-page-total');
    expect(plain.body.data.placeOrderPlain.lineTotal).toBe(43);
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.placeOrder)).toBe(
      JSON.stringify(plain.body.data.placeOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
