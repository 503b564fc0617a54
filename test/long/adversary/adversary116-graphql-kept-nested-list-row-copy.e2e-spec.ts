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
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07): a list within a list kept itself is adopted as the list is
 * (lib/graphql/kept-items.ts `keptItem` answers `list`; wire-value.ts `keptArray` recurses),
 * so the kept row node `order.header` names is the grid's row on a replay.
 *
 * Adversary 116 (graphql; the seam of 7e1c79ab: a selected list the parents' data holds
 * elsewhere is kept itself, and a replay adopts it, list-members.ts `keepsListItself` /
 * `adoptsList`, wire-value.ts `keptList` / `oneItem`): a selected list of lists
 * (`@Field(() => [[Int]]) grid`, a seat map's rows) whose first row the parent's own data names
 * elsewhere (`order.header = grid[0]`, not in the schema). The graph holds the row at `header`,
 * so the record keeps the outer array itself (`keepsListItself`: an item is in the graph), and
 * a replay adopts it as the list. But `oneItem` answers the REBUILT inner array for any array
 * item (`Array.isArray(built)`: returned as it is), so the kept outer array's `[0]` becomes a
 * new array while `order.header` stays the graph's row node: `order.grid.indexOf(order.header)`
 * answers -1 on a replay where the first call (and the app without the library) answered 0.
 *
 * User code: `@ObjectType() class Order { @Field(() => Int) id; @Field(() => [[Int]]) grid }`,
 * returned as `{ id, grid, header: grid[0] }`; `@ResolveField(() => Int) headerIndex(@Parent()
 * order) { return order.grid.indexOf(order.header) }`; the client selects
 * `{ grid headerIndex }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `writeParents` (list-members.ts `keepsListItself`: the
 * inner array is a node of the graph through `header`), `fromWire` -> `keptList` -> `oneItem`
 * (`Array.isArray(built)`: `built` returned, the kept row node dropped from the list).
 *
 * Docs quote (docs/guides/graphql.md): "where that data holds the list or one of its items at
 * another place too, an ORM's hidden snapshot of the relation or the page's own `primary`
 * line, the list is kept itself, and a replay's list is that one array, its items the
 * answer's: `order.lines === order.snapshot.lines` and `lines.indexOf(lines.primary)` answer as
 * at the first call"; and the promise that the app's `@ResolveField()`s see at the replay what
 * they saw at the first call, identity included.
 *
 * Severity: high (the replay answers otherwise than the first answer: `headerIndex` 0, then
 * -1).
 *
 * Fails now (un-skipped): without the library and at the first call
 * `{"grid":[[1,2],[3,4]],"headerIndex":0}`; the replay `{"grid":[[1,2],[3,4]],"headerIndex":-1}`.
 *
 * Controls: the same order where the hidden member names an object item of a selected list
 * (`lines.primary = lines[1]`, `{ lines { id } primaryIndex }`) answers 1 on the replay too.
 *
 * Suggested fix: in `oneItem`, adopt an array item as the list itself is adopted (`keptList`
 * again, recursively: the kept inner array made the rebuilt one's items), rather than
 * returning the rebuilt inner array; likewise a leaf's object value (a Date: see
 * adversary116-graphql-kept-list-date-item-copy).
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

  @Field(() => [[Int]])
  grid!: number[][];
}

type Held = Order & { header: number[] };

const importOrder = async (): Promise<Order> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const grid = [
    [1, 2],
    [3, 4],
  ];
  const lines = [{ id: 1 }, { id: 2 }] as Line[];
  // The page's chosen line, kept on the page out of JSON.
  Object.defineProperty(lines, 'primary', { value: lines[1] });
  const order: Held = { id: rows[0].id, lines, grid, header: grid[0] };
  return order;
};

@Resolver(() => Order)
class OrdersResolver {
  @ResolveField(() => Int)
  headerIndex(@Parent() order: Held): number {
    return order.grid.indexOf(order.header);
  }

  @ResolveField(() => Int)
  primaryIndex(@Parent() order: Order): number {
    const page = order.lines as Line[] & { primary: Line };
    return page.indexOf(page.primary);
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async importOrder(): Promise<Order> {
    return importOrder();
  }

  @Mutation(() => Order)
  async importOrderPlain(): Promise<Order> {
    return importOrder();
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

describe('adversary 116: a kept list of lists, one row named elsewhere', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv116_gql_nested_list_row', {
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

  const three = async (sel: string, key: string) => {
    const plain = await post(`mutation { importOrderPlain ${sel} }`);
    const first = await post(`mutation { importOrder ${sel} }`, key);
    const again = await post(`mutation { importOrder ${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('NESTED LIST ROW', sel, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: an object item named elsewhere is that item on a replay', async () => {
    const { plain, first, again } = await three(
      '{ lines { id } primaryIndex }',
      'adv116-nested-list-row-ctl',
    );
    expect(plain.body.data.importOrderPlain).toEqual({
      lines: [{ id: 1 }, { id: 2 }],
      primaryIndex: 1,
    });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.importOrder)).toBe(
      JSON.stringify(plain.body.data.importOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a row named elsewhere is that row of the list on a replay', async () => {
    const { plain, first, again } = await three('{ grid headerIndex }', 'adv116-nested-list-row');
    expect(plain.body.data.importOrderPlain.headerIndex).toBe(0);
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.importOrder)).toBe(
      JSON.stringify(plain.body.data.importOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
