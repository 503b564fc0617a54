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
 * Adversary 108 (graphql): a replay's parent moved onto its own node of the shared parent
 * graph (round 107, `{ p, s }`) REPLACES that node's members with the replay's built parent.
 * Where the node is also another parent's data (a summary's `order` back-reference reaching
 * every line), what that other parent's `@ResolveField()` reads through it is now the adopted
 * line's built members only: the line's fields the client did not select (its `sku`), which
 * the graph held, are deleted from the node. The summary's resolver reads `undefined` on the
 * replay where it read the skus at the first call: a wrong answer replayed.
 *
 * User code: `@ObjectType() Checkout { summary: Summary; order: Order }`, `Order { id; lines:
 * [Line] }`, `Line { id; sku }` (an ORM row whose `order` back-reference is no field),
 * `Summary { id }` whose raw object holds the order (no field) and a
 * `@ResolveField(() => String) skus(@Parent() s) { return s.order.lines.map((l) => l.sku).join(',') }`;
 * the client selects `summary { id skus } order { id lines { id } }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `writeParents` (the line, a parent for its `order`
 * back-reference, gets `s`: its node, which the summary's data reaches too) ->
 * replay: `fromWire` end (`shared.adopt(parentRefSource(...))`) -> node-classes.ts
 * `namedReader.adopt` -> parent-identity.ts `ontoNode` (deletes every own key of the node,
 * copies the built line's: `id` and `order` only).
 *
 * Docs quote (docs/guides/graphql.md): "an object several of them reach (an ORM's
 * back-reference, each `line.order` the one order with all its lines) is written once ... and
 * a replay's resolvers get one object there again" and "A replay's resolvers get the same
 * values as the first call's, and the answer is the same bytes".
 *
 * Severity: high (a wrong answer replayed: `skus` "A-1,A-2,A-3" becomes ",,").
 *
 * Fails now (un-skipped): first answer `skus` "A-1,A-2,A-3"; the replay answers ",,"
 * (every line's `sku` gone from the node the summary's order reaches).
 *
 * Controls: the same app, the client selecting `lines { id sku }` (the built line has its
 * sku, so the node keeps it) replays the same data.
 *
 * Suggested fix: in `ontoNode`, keep the node's own members the built parent does not have
 * (define the built members over the node's, deleting none but those the built one replaces),
 * or adopt only where the built parent holds every member of the node; the node is the first
 * call's object, which other parents' resolvers read whole.
 *
 * Fixed (session of 2026-12-07): parent-identity.ts `ontoNode` deletes none of the node's own
 * members: the built parent's are defined over them (at the node's places, its others after),
 * and the node's members the built parent lacks (the unselected `sku`) stay as they were, so
 * the summary's resolver reads the first call's object whole again.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  @Field()
  sku!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line])
  lines!: Line[];
}

@ObjectType()
class Summary {
  @Field(() => Int)
  id!: number;
}

@ObjectType()
class Checkout {
  @Field(() => Summary)
  summary!: Summary;

  @Field(() => Order)
  order!: Order;
}

type LineRow = Line & { order: OrderRow };
type OrderRow = Order & { lines: LineRow[] };
type SummaryRow = Summary & { order: OrderRow };

@Resolver(() => Summary)
class SummariesResolver {
  @ResolveField(() => String)
  skus(@Parent() summary: SummaryRow): string {
    return summary.order.lines.map((line) => line.sku).join(',');
  }
}

@Resolver(() => Checkout)
class CheckoutsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Checkout)
  @Idempotent()
  async checkout(@Args('n', { type: () => Int }) n: number): Promise<Checkout> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const order = { id: rows[0].id, lines: [] } as unknown as OrderRow;
    for (let i = 1; i <= n; i += 1) order.lines.push({ id: i, sku: `A-${i}`, order });
    const summary: SummaryRow = { id: rows[0].id, order };
    return { summary, order };
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
  providers: [CheckoutsResolver, SummariesResolver],
})
class CheckoutsModule {}

describe('adversary 108: a parent adopted onto a node another parent reads', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv108_gql_adopted_node', {
      module: CheckoutsModule,
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

  const twice = async (key: string, lineFields: string) => {
    const query = `mutation { checkout(n: 3) { summary { id skus } order { id lines { ${lineFields} } } } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('ADOPTED', first.text, again.text);
    const { rows } = await fixture.admin.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM orders',
    );
    return { first, again, orders: rows[0].n };
  };

  it('control: lines selected with their sku replay the same data', async () => {
    const before = (
      await fixture.admin.query<{ n: number }>('SELECT count(*)::int AS n FROM orders')
    ).rows[0].n;
    const { first, again, orders } = await twice('adv108-adopted-control', 'id sku');
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.checkout.summary.skus).toBe('A-1,A-2,A-3');
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['checkout']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
    expect(orders).toBe(before + 1);
  });

  it('a summary reading its order lines replays the same answer', async () => {
    const { first, again } = await twice('adv108-adopted-unselected', 'id');
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.checkout.summary.skus).toBe('A-1,A-2,A-3');
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['checkout']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
