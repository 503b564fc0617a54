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
 * Fixed (session of 2026-12-07, third): each object a walk sees through a Proxy is noted with
 * its Proxy (wire-value.ts `Walk.views`), and every read through one of the Proxies (`get`, and
 * an own data property's descriptor) gives that Proxy for an object noted so
 * (first-answer-view.ts `seenThrough`): the line's `order` is the order's Proxy, whose `lines`
 * are the lines' Proxies, so `indexOf(line)` finds it at the first call as on the replay. Not
 * covered: a line frozen before the walk (the Proxy's rule keeps the raw order its settled
 * stand-in holds), and a back-reference through an object the answer does not select (never
 * proxied).
 *
 * Adversary 108 (graphql): the FIRST answer breaks the identity round 107 restored for
 * replays. A line whose selected field is a getter of its class (`@Field() get label()`) is
 * handed to GraphQL seen through the library's Proxy (wire-value.ts `over`: a getter read once,
 * never again), and so is the order holding it (its `lines` replaced by the list of Proxies).
 * The line's `@ResolveField()` gets the Proxy, while `line.order.lines[i]` (read through to
 * the resolver's own order) is the raw line: `line.order.lines.indexOf(line)` is -1 at the
 * first call, where without the library it is the line's index. The replay (round 107's
 * adoption) answers the right positions: first answer and replay differ, and the first one
 * is the library's doing.
 *
 * User code: round 107's app (`Order { id; lines: [Line] }`, the line's `order` back-reference
 * no field, `position(@Parent() line) { return line.order.lines.indexOf(line) + 1 }`,
 * `siblings` by `!==`), the line an instance of `@ObjectType() class Line { @Field() id;
 * @Field() get label() { return `#${this.id}` } }`, as code-first entities compute a field;
 * the client selects `lines { id label position siblings }`; Apollo.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (`readsThroughAccessor` -> `replaced[label]`
 * -> `over(source, replaced)`: the line's first value is a Proxy; the order's `lines` list then
 * differs from the resolver's, so the order is a Proxy too, its `lines` the Proxies) ->
 * run-field.ts `first` given to GraphQL; `Reflect.get(source, 'order', source)` gives the raw
 * order, whose `lines` are the raw lines.
 *
 * Docs quote (docs/guides/graphql.md): "a getter ... read once ..., and the first answer is
 * given what was read ... (the resolver's value is not changed: the first answer is it, seen
 * through a Proxy ...)"; "Where the parent itself is reached back through its own data
 * (`line.order.lines[i]` ...), a replay's parent is that very object, as at the first call
 * (`line.order.lines.indexOf(line)` answers the same)"; "The answers are the same bytes".
 *
 * Severity: high (a wrong first answer, and a replay that differs from it: positions 0, 0, 0
 * and siblings 3 first, 1, 2, 3 and 2 on the replay).
 *
 * Fails now (un-skipped): first answer positions 0, 0, 0 and siblings 3 (without the library
 * 1, 2, 3 and 2); the replay answers 1, 2, 3 and 2.
 *
 * Controls: the same app, the lines plain rows whose `label` is data (no Proxy): 1, 2, 3 on
 * the first answer and the replay, the same bytes.
 *
 * Suggested fix: give GraphQL the resolver's own objects where only a getter's value was read
 * (answer the getter's field from a per-object side table the library's field read consults,
 * not through a Proxy), or make the Proxy's reads of the value's own data answer the Proxies
 * for the objects it proxied (a map from raw object to its Proxy, used by `get` for every
 * object read through it, arrays included).
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  // A field the entity computes (a getter of its class), as code-first classes often do.
  @Field()
  get label(): string {
    return `#${this.id}`;
  }
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line])
  lines!: Line[];
}

type LineRow = Line & { qty: number; unitPrice: number; order: OrderRow };
type OrderRow = Order & { lines: LineRow[] };

@Resolver(() => Line)
class LinesResolver {
  @ResolveField(() => Int)
  subtotal(@Parent() line: LineRow): number {
    return line.qty * line.unitPrice;
  }

  @ResolveField(() => Int)
  lineCount(@Parent() line: LineRow): number {
    return line.order.lines.length;
  }

  @ResolveField(() => Int)
  position(@Parent() line: LineRow): number {
    return line.order.lines.indexOf(line) + 1;
  }

  @ResolveField(() => Int)
  siblings(@Parent() line: LineRow): number {
    return line.order.lines.filter((other) => other !== line).length;
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
  async importOrder(
    @Args('n', { type: () => Int }) n: number,
    @Args('getter', { type: () => Boolean }) getter: boolean,
  ): Promise<OrderRow> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const order = { id: rows[0].id, lines: [] } as unknown as OrderRow;
    for (let i = 1; i <= n; i += 1) {
      const row = { id: i, qty: 2, unitPrice: i, order };
      // An instance of the entity (its label a getter), or a row whose label is data.
      order.lines.push(
        (getter ? Object.assign(new Line(), row) : { ...row, label: `#${i}` }) as LineRow,
      );
    }
    return order;
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
  providers: [OrdersResolver, LinesResolver],
})
class OrdersModule {}

describe('adversary 108: a line with a getter field is found by identity at the first answer', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv108_gql_getter_identity', {
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

  const twice = async (key: string, getter: boolean) => {
    const query = `mutation { importOrder(n: 3, getter: ${getter}) { id lines { id label position siblings } } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('GETTER IDENTITY', first.text, again.text);
    return { first, again };
  };

  it('control: lines whose label is data are found by identity, first and replay', async () => {
    const { first, again } = await twice('adv108-getter-identity-control', false);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.lines.map((l: { position: number }) => l.position)).toEqual([
      1, 2, 3,
    ]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('lines whose label is a getter are found by identity at the first answer', async () => {
    const { first, again } = await twice('adv108-getter-identity', true);
    expect(first.body.errors).toBeUndefined();
    // Without the library, GraphQL hands the resolver `order.lines[i]` itself: 1, 2, 3.
    expect(first.body.data.importOrder.lines.map((l: { position: number }) => l.position)).toEqual([
      1, 2, 3,
    ]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
