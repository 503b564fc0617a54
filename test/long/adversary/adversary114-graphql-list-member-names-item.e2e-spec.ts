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
 * Fixed (session of 2026-12-07): where the graph of the parents' data holds a selected list's
 * array or one of its items elsewhere (here `lines.primary`), the parent's record holds the
 * array itself, not `listMembers`' copy (list-members.ts `keepsListItself`, wire-value.ts
 * `writeParents`), so the array, its members and its items are nodes of one graph; a replay
 * answers that array as the list, each of its items made the answer's item (list-members.ts
 * `adoptsList`, wire-value.ts `keptList`), so `lines.primary` is `lines[1]` again. A parent's
 * object the graph reaches is written once, as its record (record-in-node.ts).
 *
 * Adversary 114 (graphql; array members of this session, list-members.ts `listMembers` /
 * `withListMembers`): a selected list field whose own member that is no item NAMES one of its
 * items (`Object.defineProperty(lines, 'primary', { value: lines[1] })`: the page's chosen
 * line, kept out of JSON; or a `byId` Map of its items). Without the library, and at the first
 * call, a `@ResolveField()` that finds it among the items (`order.lines.indexOf(
 * order.lines.primary)`) answers 1. On a replay the list is rebuilt from the answer and the
 * member defined onto it from the parent's kept data (`__parent`): a COPY of the line, no item
 * of the list, so `indexOf` answers -1 (and `byId.get(2) === lines[1]` is false; an item's
 * hidden back-reference to its page, `line.page === order.lines`, is false too): the replay is
 * not the first answer.
 *
 * User code: `@ObjectType() class Order { @Field(() => Int) id; @Field(() => [Line]) lines }`,
 * `@ResolveField(() => Int) primaryIndex(@Parent() order) { return
 * order.lines.indexOf(order.lines.primary) }`; `@Mutation(() => Order) @Idempotent()
 * importOrder()` returning `{ id, lines }` with `Object.defineProperty(lines, 'primary',
 * { value: lines[1] })`; the client selects `{ lines { id } primaryIndex }`; Apollo, code-first.
 *
 * Code path: lib/graphql/list-members.ts `listMembers` (the member's value written into the
 * parent's graph apart from the answer's items) and `withListMembers` (defined onto the list
 * rebuilt from the answer: its value is the graph's node, not the rebuilt item); wire-value.ts
 * `fromWire` (`withListMembers(value[name], item)`).
 *
 * Docs quote (docs/guides/graphql.md): "a selected list field's own members that are no items
 * (`order.lines.total` under a selected `lines { id }`, whose answer holds the items only) are
 * kept too and defined again onto the list a replay rebuilds from the answer"; "one object
 * answered at two places, an order's `primary` line also `lines[0]`, is one Proxy at both, so
 * `line.order.primary === line` holds at each place as without the library"; the promise:
 * every replay answers the first answer byte for byte.
 *
 * Severity: high (the replay answers otherwise than the first answer: `primaryIndex` 1, then -1).
 *
 * Fails now (un-skipped): without the library and at the first call `{"lines":[{"id":1},
 * {"id":2}],"primaryIndex":1}`; the replay `{"lines":[{"id":1},{"id":2}],"primaryIndex":-1}`.
 *
 * Controls: the same order with `lines` not selected (`{ primaryIndex }`: the array kept
 * whole, its member and items one graph) answers as without the library and replays the same
 * bytes.
 *
 * Suggested fix: write a selected list's members into the same graph as the list's items
 * (the items' nodes adopted by the rebuilt list, as an object at two places is one node), so a
 * member naming an item is that item on a replay; or keep the member as a reference to the
 * item's index.
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

type Page = Line[] & { primary: Line };

const importOrder = async (): Promise<Order> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const lines = [{ id: 1 }, { id: 2 }] as Line[];
  // The page's chosen line, kept on the page out of JSON.
  Object.defineProperty(lines, 'primary', { value: lines[1] });
  return { id: rows[0].id, lines };
};

@Resolver(() => Order)
class OrdersResolver {
  @ResolveField(() => Int)
  primaryIndex(@Parent() order: Order): number {
    const page = order.lines as Page;
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

describe('adversary 114: a selected list member naming an item', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv114_gql_list_member_item', {
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
    console.log('LIST MEMBER ITEM', sel, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: the list not selected answers as without the library, and replays', async () => {
    const { plain, first, again } = await three('{ primaryIndex }', 'adv114-member-item-ctl');
    expect(plain.body.data.importOrderPlain).toEqual({ primaryIndex: 1 });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.importOrder)).toBe(
      JSON.stringify(plain.body.data.importOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a selected list member naming an item is that item on a replay', async () => {
    const { plain, first, again } = await three(
      '{ lines { id } primaryIndex }',
      'adv114-member-item',
    );
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.importOrder)).toBe(
      JSON.stringify(plain.body.data.importOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
