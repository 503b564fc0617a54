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
 * Fixed (session of 2026-12-07): an object whose record is empty (the answer holds all it has)
 * is noted (wire-value.ts `writeParent` -> `bareParents`); where it is an item of a list kept
 * itself, at any depth (list-members.ts `keptListItems`), `writeParents` writes it as its empty
 * record (`writtenAs`), and the replay makes that node the answer's item (`keptList`): the
 * rows are stored once, and the page's `primary` stays under the limit.
 *
 * Adversary 116 (graphql; the seam of 7e1c79ab: a selected list the parents' data holds an
 * item of elsewhere is kept ITSELF in the parent's record, list-members.ts `keepsListItself`,
 * wire-value.ts `writeParents`): the page's own `primary` line (`Object.defineProperty(lines,
 * 'primary', { value: lines[1] })`, adversary 114's case) over lines whose selected fields are
 * large (`lines { id body }`, a 1 kB body each). Kept itself, the array's items are written
 * into the parents' graph WHOLE, their selected `body` included, which the answer already
 * holds: the stored answer is about twice the answer (the same order with a member that names
 * no item, `lines.total`, kept as `listMembers`' copy, is not). Under `maxResponseBytes: 4500`
 * (the answer is ~3.1 kB, and with `lines.total` it fits) the size trim then leaves out the
 * order's kept data, `lines.primary` with it, and the replay's resolver reads `undefined`:
 * `primaryIndex` answers "-1:undefined" where the first call answered "1:object". Without the
 * limit (or with 7500) the replay answers the first answer: only the doubled rows push it over.
 *
 * User code: `@ObjectType() class Line { @Field(() => Int) id; @Field() body: string }`,
 * `@ObjectType() class Order { @Field(() => Int) id; @Field(() => [Line]) lines }`; the
 * repository returns a page with its chosen line on the page itself
 * (`Object.defineProperty(lines, 'primary', { value: lines[1] })`); `@ResolveField(() =>
 * String) primaryIndex(@Parent() order) { ...order.lines.indexOf(order.lines.primary)... }`;
 * `@Mutation(() => Order) @Idempotent({ maxResponseBytes: 4500 }) importOrder(shape)`; the
 * client selects `{ lines { id body } primaryIndex }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `writeParents` (`keepsListItself` true, `defineOwn(
 * record, property, list)`: the record holds the array, and `keepAll` writes the array's items,
 * as nodes, by the sizes observed whole rows (apparently no `writtenAs` record for rows that
 * keep no data of their own beyond the answer), then the size trim (parent-data-within.ts / hidden-within.ts).
 *
 * Docs quote (docs/guides/graphql.md): "an object that is itself a parent of the answer ... is
 * that one node, holding the data its record keeps: never its whole row, whose selected fields
 * the answer holds, and never its data twice"; "where that data holds the list or one of its
 * items at another place too, ... the page's own `primary` line, the list is kept itself ...
 * `lines.indexOf(lines.primary)` answer as at the first call"; and the trim leaves out data
 * "as little as brings the answer under the limit".
 *
 * Severity: high (the replay answers otherwise than the first answer, under a limit the answer
 * and its kept data fit, where the selected rows were not stored twice; medium at least: the
 * stated "never its whole row ... never its data twice" is crossed, doubling the stored size).
 *
 * Fails now (un-skipped): first call `{"lines":[{"id":1,"body":"bbb…"},…],"primaryIndex":
 * "1:object:undefined"}`; replay `{…,"primaryIndex":"-1:undefined:undefined"}`. Observed
 * thresholds (by hand): lost at 3500, 4500 and 6000 bytes, kept at 7500 and 20000.
 *
 * Controls: the same order whose page holds a member that names no item (`lines.total = 3`,
 * kept as `listMembers`' copy beside the answer) replays `lines.total` 3 under the same
 * 4500-byte limit.
 *
 * Suggested fix: where the list is kept itself, write each item as the answer's record of it
 * (its own data beyond its selected fields, `writtenAs` for every item even one with an empty
 * record), never the item's whole row; or keep the member as a reference to the item's index
 * in the answer (`primary: item 1`) instead of keeping the array.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  @Field(() => String)
  body!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line])
  lines!: Line[];
}

const importOrder = async (shape: string): Promise<Order> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const order = { id: rows[0].id } as Order;
  const lines: Line[] = [1, 2, 3].map((id) => ({ id, body: 'b'.repeat(1000) }));
  // The page's chosen line (or its count), kept on the page itself out of JSON.
  if (shape === 'total') Object.defineProperty(lines, 'total', { value: 3 });
  else Object.defineProperty(lines, 'primary', { value: lines[1] });
  order.lines = lines;
  return order;
};

@Resolver(() => Order)
class OrdersResolver {
  @ResolveField(() => String)
  primaryIndex(@Parent() order: Order): string {
    const page = order.lines as Line[] & { primary?: Line; total?: number };
    return `${page.indexOf(page.primary!)}:${typeof page.primary}:${page.total}`;
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent({ maxResponseBytes: 4500 })
  async importOrder(@Args('shape') shape: string): Promise<Order> {
    return importOrder(shape);
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

describe('adversary 116: the rows of a list kept itself stored whole, and the trim', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv116_gql_list_rows_twice', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string, key: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(60_000)
      .send(JSON.stringify({ query }));

  const twice = async (shape: string, key: string) => {
    const query = `mutation { importOrder(shape: "${shape}") { lines { id body } primaryIndex } }`;
    const first = await post(query, key);
    const again = await post(query, key);
    // eslint-disable-next-line no-console
    console.log('KEPT LIST ROWS TWICE', shape, first.text, again.text);
    return { first, again };
  };

  it('control: a page member naming no item is kept under the limit, and the replay is the first answer', async () => {
    const { first, again } = await twice('total', 'adv116-list-rows-twice-total');
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.primaryIndex).toBe('-1:undefined:3');
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a page member naming an item is kept under the limit the answer fits', async () => {
    const { first, again } = await twice('primary', 'adv116-list-rows-twice-primary');
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.primaryIndex).toBe('1:object:undefined');
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
