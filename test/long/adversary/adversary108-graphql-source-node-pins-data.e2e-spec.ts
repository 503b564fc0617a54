import { jest } from '@jest/globals';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Logger, Module } from '@nestjs/common';
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
 * Fixed (session of 2026-12-07, third): a kept parent's own object's node (`s`) is no longer a
 * root of the trimmed graph (parent-data-within.ts): the graph keeps what the kept parents'
 * data and the pinned `__kept`s reach, and each ref is moved onto it by parent-graph.ts
 * `movedRef`, which keeps `s` only where that node is still reached (dropped otherwise: no
 * data a replay reads reaches it). A pinned `__kept`'s `s` is moved alike (it was written
 * without its `s` after a round). The weights (`ownBytes`) and what a round frees now count
 * the same nodes: leaving the summary's data out frees the lines' rows, and is enough.
 *
 * Changed (session of 2026-12-07, adversary 114): a line's own object's node is now written as
 * its data's record (`{ orderId }`, record-in-node.ts: one node, its data once), never its raw
 * row; the summary's order reaches those small nodes, the answer is under the limit and
 * nothing is left out, which the last assertion now says (it said one parent's data went).
 *
 * Adversary 108 (graphql): when the stored answer is over `maxResponseBytes`, each kept
 * parent's own object's node (`s`, round 107) is kept as a root of the trimmed graph
 * (parent-data-within.ts: "Each kept parent's own object's node stays too"), though after the
 * summary's data is left out NO kept parent's data reaches it: it is kept only so that a
 * replay can adopt it, and it holds the line's whole raw row (its large selected
 * `description`, already in the answer). Leaving the summary's `__parent` out (its order,
 * reaching all 40 lines: the one large parent) frees nothing of the lines, so 31 lines' own
 * data (`{ orderId }`, a few bytes each) is left out too, as "the largest" by rounds, and
 * their `@ResolveField()` replays reading no `orderId`. The weights (`ownBytes`) do not count
 * the sources, so the summary alone looked enough, and was not.
 *
 * User code: `Checkout { summary: Summary; order: Order }`, `Order { id; lines: [Line] }`,
 * `Line { id; description }` whose row holds `orderId` (no field) read by
 * `@ResolveField(() => String) ref(@Parent() line) { return `order-${line.orderId}` }`;
 * the summary row holds the order it sums up (no field); 40 lines of 4,000-character
 * descriptions, selected; `maxResponseBytes: 240_000` (the answer is 162 kB); Apollo.
 *
 * Code path: lib/graphql/run-field.ts -> parent-data-within.ts `parentDataWithin`
 * (`graphReachedBy(shared, [...still, ...sources, ...pinnedRoots()])`; weights by
 * `ownBytes(shared, [...nodes, ...pinnedRoots()])`, sources not among them) ->
 * parent-graph.ts `graphReachedBy`.
 *
 * Docs quote (docs/guides/graphql.md): "the largest `__parent`s are left out, as few as bring
 * it under, and the app's log says so (a `__parent` weighs the data only it reaches: data
 * another kept `__parent` reaches too stays, and goes with the last of them)".
 *
 * Severity: high (a wrong answer replayed: 31 of 40 lines' `ref` "order-2" becomes
 * "order-undefined", where leaving the summary's data out alone fits).
 *
 * Fails now (un-skipped): the log says "the own data of 32 parent(s) ... is not stored"; the
 * replay answers `ref` "order-undefined" for 31 lines.
 *
 * Controls: the summary row holding no order (no graph reaching the lines): the answer fits,
 * nothing is left out, the replay is the same bytes.
 *
 * Suggested fix: keep a parent's source node only where a kept root (another parent's data, a
 * pinned `__kept`) still reaches it, dropping `s` otherwise (identity inside data nobody keeps
 * is moot); or count the sources in `ownBytes` so the weights are what leaving out frees.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  @Field()
  description!: string;
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

type LineRow = Line & { orderId: number };
type OrderRow = Order & { lines: LineRow[] };
type SummaryRow = Summary & { order: OrderRow };

@Resolver(() => Line)
class LinesResolver {
  // Reads a column no field exposes: the line's own data (`__parent`).
  @ResolveField(() => String)
  ref(@Parent() line: LineRow): string {
    return `order-${line.orderId}`;
  }
}

@Resolver(() => Summary)
class SummariesResolver {
  @ResolveField(() => Int)
  lineCount(@Parent() summary: SummaryRow): number {
    return summary.order?.lines.length ?? 0;
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
  async checkout(
    @Args('n', { type: () => Int }) n: number,
    @Args('withOrder', { type: () => Boolean }) withOrder: boolean,
  ): Promise<Checkout> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const id = rows[0].id;
    const order = { id, lines: [] } as unknown as OrderRow;
    for (let i = 1; i <= n; i += 1) {
      order.lines.push({ id: i, orderId: id, description: `${i}:`.padEnd(4000, 'x') });
    }
    // The summary row holds the order it sums up (no field), or only its id.
    const summary = withOrder ? { id, order } : { id, orderId: id };
    return { summary, order };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, maxResponseBytes: 240_000 }),
    }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [CheckoutsResolver, SummariesResolver, LinesResolver],
})
class CheckoutsModule {}

describe('adversary 108: parents own objects nodes pinned when trimming for maxResponseBytes', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv108_gql_source_pins', {
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

  const twice = async (key: string, withOrder: boolean) => {
    const query = `mutation { checkout(n: 40, withOrder: ${withOrder}) { summary { id } order { id lines { id description ref } } } }`;
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const first = await post(key, query);
      const again = await post(key, query);
      const said = warn.mock.calls
        .map((call) => String(call[0]))
        .filter((line) => line.includes('is not stored with the answer'));
      const refs = (body: { data?: { checkout?: { order: OrderRow } } }) =>
        body.data?.checkout?.order.lines.map((line) => (line as unknown as { ref: string }).ref);
      // eslint-disable-next-line no-console
      console.log('PINS', first.text.length, said, refs(again.body)?.join(' '));
      return { first, again, said, refs };
    } finally {
      warn.mockRestore();
    }
  };

  it('control: a summary holding no order, the answer fits and replays the same', async () => {
    const { first, again, said } = await twice('adv108-pins-control', false);
    expect(first.body.errors).toBeUndefined();
    expect(said).toEqual([]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['checkout']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('leaving the summary order out is enough: every line replays its ref', async () => {
    const { first, again, said, refs } = await twice('adv108-pins', true);
    expect(first.body.errors).toBeUndefined();
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['checkout']);
    // The lines' own data is 40 small `{ orderId }`s, and each line's node is that data (never
    // its row, whose 4 kB description the answer holds): nothing is left out (adversary 114).
    expect(refs(again.body)).toEqual(refs(first.body));
    expect(said).toEqual([]);
  });
});
