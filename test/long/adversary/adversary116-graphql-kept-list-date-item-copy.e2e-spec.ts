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
 * Fixed (session of 2026-12-07): a place of a list kept itself is given back by one rule at
 * every depth (lib/graphql/kept-items.ts `keptItem`, used by wire-value.ts `oneItem`): a
 * leaf's object value rebuilt from the answer (a Date) is the kept node itself where that node
 * is of its very class, so `order.next` and `order.reminders[1]` are one Date again.
 *
 * Adversary 116 (graphql; the seam of 7e1c79ab: a selected list the parents' data holds
 * elsewhere is kept itself, and a replay adopts it, list-members.ts `keepsListItself` /
 * `adoptsList`, wire-value.ts `keptList` / `oneItem`): a selected list of a scalar whose values
 * are objects (`@Field(() => [Date]) reminders`), one of which the parent's own data names
 * elsewhere (`order.next = reminders[1]`, the next reminder due, not in the schema). The graph
 * holds the Date at `next`, so the record keeps the array itself (`keepsListItself`), and a
 * replay adopts that array as the list. But `oneItem` makes each item the answer's REBUILT
 * Date where the kept node is no plain object (parent-identity.ts `adoptsNode` refuses a Date,
 * an array): the kept array's `[1]` is replaced by a new Date while `order.next` stays the
 * graph's Date node, so `order.reminders.indexOf(order.next)` answers -1 on a replay where the
 * first call (and the app without the library) answered 1.
 *
 * User code: `@ObjectType() class Order { @Field(() => Int) id; @Field(() => [Date])
 * reminders }`, returned as `{ id, reminders, next: reminders[1] }`; `@ResolveField(() => Int)
 * nextIndex(@Parent() order) { return order.reminders.indexOf(order.next) }` (which reminder
 * is due); the client selects `{ reminders nextIndex }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `writeParents` (list-members.ts `keepsListItself`: the
 * Date item is a node of the graph through `next`, so the record holds the array itself),
 * `fromWire` -> `keptList` -> `oneItem` (`adoptsNode(kept)` false for a Date: `built` returned,
 * so `node[1]` becomes the rebuilt Date, no longer the node `next` names).
 *
 * Docs quote (docs/guides/graphql.md): "where that data holds the list or one of its items at
 * another place too, an ORM's hidden snapshot of the relation or the page's own `primary`
 * line, the list is kept itself, and a replay's list is that one array, its items the
 * answer's: `order.lines === order.snapshot.lines` and `lines.indexOf(lines.primary)` answer as
 * at the first call"; and the promise that the app's `@ResolveField()`s see at the replay what
 * they saw at the first call, identity included.
 *
 * Severity: high (the replay answers otherwise than the first answer: `nextIndex` 1, then -1).
 *
 * Fails now (un-skipped): without the library and at the first call
 * `{"reminders":["2026-01-01T00:00:00.000Z","2026-02-01T00:00:00.000Z"],"nextIndex":1}`; the
 * replay `{"reminders":[...same...],"nextIndex":-1}`.
 *
 * Controls: the same order where the hidden member names an object item of a selected list
 * (`lines.primary = lines[1]`, `{ lines { id } primaryIndex }`) answers 1 on the replay too.
 *
 * Suggested fix: in `oneItem`, where `built` is a leaf's value (a Date, any object of a scalar)
 * or an array (a nested list), keep the kept node itself (it is the first call's value, the
 * rebuilt one only equal to it), or adopt it by index as for plain objects; at least for a
 * leaf list, keep `node[index]` where `built` is equal in its wire form.
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

  @Field(() => [Date])
  reminders!: Date[];
}

type Held = Order & { next: Date };

const importOrder = async (): Promise<Order> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const reminders = [new Date('2026-01-01T00:00:00Z'), new Date('2026-02-01T00:00:00Z')];
  const lines = [{ id: 1 }, { id: 2 }] as Line[];
  // The page's chosen line, kept on the page out of JSON.
  Object.defineProperty(lines, 'primary', { value: lines[1] });
  const order: Held = { id: rows[0].id, lines, reminders, next: reminders[1] };
  return order;
};

@Resolver(() => Order)
class OrdersResolver {
  @ResolveField(() => Int)
  nextIndex(@Parent() order: Held): number {
    return order.reminders.indexOf(order.next);
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

describe('adversary 116: a kept list of Dates, one named elsewhere', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv116_gql_list_date_item', {
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
    console.log('LIST DATE ITEM', sel, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: an object item named elsewhere is that item on a replay', async () => {
    const { plain, first, again } = await three(
      '{ lines { id } primaryIndex }',
      'adv116-list-date-item-ctl',
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

  it('a Date item named elsewhere is that Date on a replay', async () => {
    const { plain, first, again } = await three('{ reminders nextIndex }', 'adv116-list-date-item');
    expect(plain.body.data.importOrderPlain.nextIndex).toBe(1);
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.importOrder)).toBe(
      JSON.stringify(plain.body.data.importOrderPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
