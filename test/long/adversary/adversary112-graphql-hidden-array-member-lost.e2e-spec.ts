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
 * Fixed (session of 2026-12-07): (1) an array's (a Map's, a Set's) own data members are written
 * whatever their enumerability, as an object's, never its `length` (lib/graphql/typed-graph.ts
 * `node`); (2) a selected list field's own members that are no items are kept in its parent's
 * `__parent` under the field's property, as an empty array holding them as they were defined
 * (lib/graphql/list-members.ts `listMembers`, from wire-value.ts `walkValue`), and a replay
 * defines them onto the list rebuilt from the answer (`withListMembers`, from `fromWire`).
 *
 * Adversary 112 (graphql; the last hour's hidden-members.ts): an array's own member that is not
 * an item is lost from a parent's kept data in two ways, so a `@ResolveField()` reading it
 * answers at the first call and a committed mutation's replay answers `data: null` with
 * "Cannot return null for non-nullable field Order.totalLines." (1) Not enumerable: hidden
 * members are now kept for plain objects and instances only (typed-graph.ts `members(of)` for
 * an array passes `hidden = false`), so `Object.defineProperty(page, 'total', { value: 43 })`
 * (a page's total count kept out of JSON, on the page itself) is silently gone, where the
 * same member on an object is kept; the docs say any own key comes back "whatever its
 * enumerability". (2) Enumerable, but the array is a SELECTED list field (`lines { id subtotal }`):
 * the replay's parent holds the list rebuilt from the answer (items only), not the kept raw
 * array, so even an enumerable `lines.total` is gone; with `lines` unselected the same enumerable
 * member replays (the control).
 *
 * User code: `Order { id; lines: [Line] }`; the mutation returns `order` whose `lines` array
 * carries `total` (`Object.defineProperty(order.lines, 'total', { value: 43, enumerable })`);
 * `@ResolveField(() => Int) totalLines(@Parent() order) { return order.lines.total }`; Apollo,
 * code-first, `@Idempotent()`.
 *
 * Code path: (1) lib/graphql/typed-graph.ts `graphWriter` -> array node
 * `members(of, isIndex)` (hidden false) -> hidden-members.ts `keptMember` 'none'; (2)
 * wire-value.ts `walkValue`/`fromWire`: a selected list's own members beyond its items are not
 * in the `__parent` record, and the replay builds the list from the answer's items.
 *
 * Docs quote (docs/guides/graphql.md): "any own key comes back an own key, in its order,
 * whatever its enumerability"; "an array's holes and own members that are no items ... come
 * back"; "its selected object fields' own data beyond their selection, at any depth"; "A
 * replay's resolvers get the same values as the first call's, and the answer is the same bytes".
 *
 * Severity: high (a committed mutation's replay answers `data: null` and an error where the
 * first answer was whole; no log line names the loss).
 *
 * Fails now (un-skipped): (1) first `{"importOrder":{"id":2,"totalLines":43}}`, replay
 * `{"errors":[{"message":"Cannot return null for non-nullable field Order.totalLines.",...}],
 * "data":null}`; (2) first `{"importOrder":{"id":3,"totalLines":43,"lines":[...]}}`, replay the
 * same error and `data: null`.
 *
 * Controls: an enumerable `total` on an unselected array replays the same bytes.
 *
 * Suggested fix: keep an array's (Map's, Set's) own data members whatever their enumerability,
 * as for objects (pass `hidden` for them, never `length`); and keep a selected list field's own
 * non-index members in the parent's record (or its raw array under `__kept`), restored onto the
 * rebuilt list; or say both losses in the log and the docs.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line])
  lines!: Line[];
}

type LineRow = Line & { qty: number; unitPrice: number };
type OrderRow = Order & { lines: LineRow[] };

@Resolver(() => Line)
class LinesResolver {
  @ResolveField(() => Int)
  subtotal(@Parent() line: LineRow): number {
    return line.qty * line.unitPrice;
  }
}

@Resolver(() => Order)
class OrdersResolver {
  @ResolveField(() => Int)
  totalLines(@Parent() order: OrderRow): number {
    return (order.lines as LineRow[] & { total: number }).total;
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async importOrder(
    @Args('n', { type: () => Int }) n: number,
    @Args('hidden', { type: () => Int }) cache: number,
  ): Promise<OrderRow> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const order = { id: rows[0].id, lines: [] } as unknown as OrderRow;
    for (let i = 1; i <= n; i += 1) {
      const row = { id: i, qty: 2, unitPrice: i } as unknown as LineRow;
      order.lines.push(row);
    }
    // The page's total count kept on the page itself, out of JSON (not enumerable).
    // (the control: as plain data, enumerable).
    Object.defineProperty(order.lines, 'total', { value: 40 + n, enumerable: cache === 0 });
    return order;
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, maxResponseBytes: 1024 * 1024 }),
    }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [OrdersResolver, LinesResolver],
})
class OrdersModule {}

describe('adversary 112: a hidden member of an array is lost on a replay', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv112_gql_hidden_array', {
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
      .timeout(60_000)
      .send(JSON.stringify({ query }));

  const twice = async (key: string, cache: number, lines: boolean) => {
    const query = `mutation { importOrder(n: 3, hidden: ${cache}) { id totalLines${lines ? ' lines { id subtotal }' : ''} } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('ARRAY MEMBER', cache, lines, first.text, again.text);
    return { first, again };
  };

  it('control: an enumerable member of an unselected array replays the same answer', async () => {
    const { first, again } = await twice('adv112-array-control', 0, false);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.totalLines).toBe(43);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a hidden member of an unselected array is there for a replay resolver (found by review, round 112)', async () => {
    const { first, again } = await twice('adv112-array-hidden', 1, false);
    expect(first.body.data.importOrder.totalLines).toBe(43);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a member of a selected list is there for a replay resolver (found by review, round 112)', async () => {
    const { first, again } = await twice('adv112-array-selected', 0, true);
    expect(first.body.data.importOrder.totalLines).toBe(43);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
