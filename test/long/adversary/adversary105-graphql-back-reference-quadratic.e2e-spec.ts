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
 * Fixed (session of 2026-12-07): the own data of one stored answer's parents is written into
 * ONE typed graph (lib/graphql/typed-graph.ts `writeGraphs`, kept-data.ts `keepAll`, called once
 * per answer by wire-value.ts `writeParents` after the walk), stored once beside the answer
 * (field-answer.ts, the envelope's `parentGraph`); each `__parent` names its node (`{ p }`,
 * parent-graph.ts), and the order every line points back at is one node, written once: size
 * and write linear in the data. A replay reads the graph once (kept-data.ts `sharedReader`,
 * passed down `fromWire`), so every line's `order` is one object again, as at the first call.
 * Records stored before (a graph per `__parent`, superjson's `{ json, meta }`) read as they
 * did. `parentDataWithin` weighs a parent by its members and the nodes only it reaches
 * (parent-graph.ts `ownBytes`) and shrinks the graph to what the parents kept reach
 * (`graphReachedBy`): a node a kept parent still reaches is never freed.
 *
 * Previously not fixed (fixer, session of 2026-12-07): writing shared objects once needs one typed
 * graph per stored answer (each `__parent` a reference into it), which changes the stored
 * answer's format (a member of the answer envelope, `encodeAnswer`/`decodeAnswer`, kept through
 * the middleware-outputs completion), `fromWire`'s reader (the shared graph read once per
 * replay, the old per-parent graph and superjson still read), and `parentDataWithin`'s
 * trimming, which leaves out the largest `__parent`s one by one and would have to write the
 * shared graph again without them (a node two parents share is freed only when both go).
 * Too wide to do and guard within this session; the suggested fixes stand.
 *
 * Adversary 105 (graphql): an ORM's ordinary bidirectional relation (TypeORM/MikroORM/Prisma
 * `include` shapes: `order.lines[i].order === order`) under a type with a `@ResolveField()`
 * makes each line's kept own data (`__parent`) hold the WHOLE order again, with all its lines:
 * every parent's data is written as its own typed graph (`keepData` per object), so the one
 * shared order is written once per line. The stored answer grows with the square of the lines
 * (40 -> 80 lines: x3.9, not x2), and at 200 lines (6 kB of data) it passes the default
 * `maxResponseBytes` (1 MiB): the library then leaves the lines' `__parent`s out, and a replay's
 * `@ResolveField()` reads `qty`/`unitPrice` as undefined: the replay answers `"Int cannot
 * represent non-integer value: NaN"` errors where the first answer had the subtotals. Without
 * the back-reference, the same 200 lines replay the same answer.
 *
 * User code: `@ObjectType() Order { @Field(() => Int) id; @Field(() => [Line]) lines }`,
 * `@ObjectType() Line { @Field(() => Int) id }` (its `qty`, `unitPrice` and `order` are no
 * fields); `@ResolveField(() => Int) subtotal(@Parent() l) { return l.qty * l.unitPrice }`;
 * `@Mutation(() => Order) @Idempotent() importOrder(n)` returning the order whose lines each
 * point back at it (`line.order = order`, as an ORM loads both sides); Apollo.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (per object) -> `writeParent(wire, parent)`
 * -> lib/graphql/kept-data.ts `keepData(parent)` -> lib/graphql/typed-graph.ts `writeGraph`:
 * one graph per parent, sharing nothing with the others (the graph's shared references work
 * only inside one write), so the order reached from each line is written N times; then
 * lib/graphql/run-field.ts `parentDataWithin` leaves the largest `__parent`s out.
 *
 * Docs quote (docs/guides/graphql.md): "A replay's resolvers get the same values as the first
 * call's, and the answer is the same bytes"; the typed graph keeps "shared references (a
 * cycle too)"; `__parent`s are left out only "where that data would take the stored answer
 * past the route's `maxResponseBytes` (a large column no client selects ...)".
 *
 * Severity: high (a replay answers errors where the first call answered data; the stored size
 * is quadratic in the rows, and so is the write, on the event loop).
 *
 * Fails now (un-skipped): stored size ratio 80/40 lines about 3.9 (2.0 without the
 * back-reference); at 200 lines the replay answers `data: null` with an error at
 * `subtotal` ("Int cannot represent non-integer value: NaN").
 *
 * Controls: the same lines without the back-reference: stored size linear (ratio about 2),
 * and 200 lines replay the same answer.
 *
 * Suggested fix: write the parents of one answer into ONE typed graph (shared nodes written
 * once, each `__parent` naming its node), or keep only the members a resolver can reach
 * without the objects already stored as the answer (an object that is itself a stored parent
 * or the mutation's own value kept as a reference to it, not written again).
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

type LineRow = Line & { qty: number; unitPrice: number; order?: OrderRow };
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
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async importOrder(
    @Args('n', { type: () => Int }) n: number,
    @Args('backRef') backRef: boolean,
  ): Promise<OrderRow> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const order: OrderRow = { id: rows[0].id, lines: [] };
    for (let i = 1; i <= n; i += 1) {
      const line: LineRow = { id: i, qty: 2, unitPrice: i };
      if (backRef) line.order = order;
      order.lines.push(line);
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

describe('adversary 105: a back-reference written again in every parent', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv105_gql_back_reference', {
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

  const query = (n: number, backRef: boolean) =>
    `mutation { importOrder(n: ${n}, backRef: ${String(backRef)}) { id lines { id subtotal } } }`;

  /** The stored answer's size in bytes for `n` lines. */
  const stored = async (n: number, backRef: boolean): Promise<number> => {
    const key = `adv105-backref-${n}-${String(backRef)}`;
    const first = await post(key, query(n, backRef));
    expect(first.body.data.importOrder.lines).toHaveLength(n);
    // The latest key (each GraphQL root field's key is derived: not the header's text).
    const { rows } = await fixture.admin.query<{ bytes: number }>(
      'SELECT length(response_body) AS bytes FROM idempotency_keys ORDER BY created_at DESC LIMIT 1',
    );
    expect(rows).toHaveLength(1);
    return rows[0].bytes;
  };

  const replays = async (n: number, backRef: boolean) => {
    const key = `adv105-backref-replay-${n}-${String(backRef)}`;
    const first = await post(key, query(n, backRef));
    const again = await post(key, query(n, backRef));
    // eslint-disable-next-line no-console
    console.log('BACKREF', n, backRef, first.text.slice(0, 120), again.text.slice(0, 240));
    expect(first.body.data.importOrder.lines[9].subtotal).toBe(20);
    return again.body;
  };

  it('control: without the back-reference the stored answer grows linearly and replays', async () => {
    const ratio = (await stored(80, false)) / (await stored(40, false));
    expect(ratio).toBeLessThan(2.5);
    const again = await replays(200, false);
    expect(again.errors).toBeUndefined();
    expect(again.data.importOrder.lines[9].subtotal).toBe(20);
  });

  it('with the back-reference the stored answer grows linearly and 200 lines replay', async () => {
    const ratio = (await stored(80, true)) / (await stored(40, true));
    // eslint-disable-next-line no-console
    console.log('RATIO', ratio);
    const again = await replays(200, true);
    expect({
      ratio: ratio < 2.5,
      errors: again.errors,
      subtotal: again.data?.importOrder?.lines?.[9]?.subtotal,
    }).toEqual({
      ratio: true,
      errors: undefined,
      subtotal: 20,
    });
  });
});
