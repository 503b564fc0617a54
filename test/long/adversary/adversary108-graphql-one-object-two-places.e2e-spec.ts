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
 * Adversary 108 (graphql): a replay's parent is moved onto its own node of the shared graph
 * (round 107, `{ p, s }`) once per node per replay (node-classes.ts `namedReader.adopt`: "the
 * same object answered at two places: the first keeps it"). At the first call one line object
 * answered at two places of the value (an order's `primary` line, also `lines[0]`, as an ORM
 * gives the same entity for both relations) is ONE object: `line.order.lines.indexOf(line)`
 * answers the same at both places. On a replay only the first place is the node; the second
 * is a fresh object that no `order.lines` holds, and its resolver answers otherwise.
 *
 * User code: `@ObjectType() Order { id; primary: Line; lines: [Line] }`, `Line { id }` (its
 * `order` back-reference no field), `@ResolveField(() => Int) position(@Parent() line) {
 * return line.order.lines.indexOf(line) + 1 }`; the mutation returns the order whose
 * `primary` is `lines[0]`; the client selects `primary { id position } lines { id position }`;
 * Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (the one line walked at each place, each a
 * parent with the same `s`) -> replay: `fromWire` end -> node-classes.ts `namedReader.adopt`
 * (`taken`: the second place gets no node) -> parent-identity.ts `adoptsNode`.
 *
 * Docs quote (docs/guides/graphql.md): "Where the parent itself is reached back through its
 * own data (`line.order.lines[i]`, as an ORM loads both sides of a relation), a replay's parent
 * is that very object, as at the first call (`line.order.lines.indexOf(line)` answers the
 * same)" and "A replay's resolvers get the same values as the first call's".
 *
 * Severity: high (a wrong answer replayed: `lines[0].position` 1 becomes 0).
 *
 * Fails now (un-skipped): first answer `primary.position` 1 and `lines` positions 1, 2, 3;
 * the replay answers `primary.position` 1 and `lines` positions 0, 2, 3.
 *
 * Controls: the same app with `primary` a line of its own (not in `lines`) replays the same
 * data.
 *
 * Suggested fix: where a node is taken already, give the later place the same object (the
 * first call's was one object): define the later place's built members onto the adopted node
 * too (its fields are the same object's), or build each place of one source once; at least
 * say in the docs that one object at two places replays as two.
 *
 * Fixed (session of 2026-12-07): parent-identity.ts `adoptsNode` takes a node made a parent at
 * an earlier place of the replay again (`taken`: true, whatever its prototype is now), and
 * `ontoNode` defines the later place's built members over it: `primary` and `lines[0]` are one
 * object, as at the first call.
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

  @Field(() => Line)
  primary!: Line;

  @Field(() => [Line])
  lines!: Line[];
}

type LineRow = Line & { qty: number; unitPrice: number; order: OrderRow };
type OrderRow = Order & { lines: LineRow[]; primary: LineRow };

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
    @Args('shared', { type: () => Boolean }) shared: boolean,
  ): Promise<OrderRow> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const order = { id: rows[0].id, lines: [] } as unknown as OrderRow;
    for (let i = 1; i <= n; i += 1) {
      order.lines.push({ id: i, qty: 2, unitPrice: i, order });
    }
    // An ORM gives the one entity for both relations; or a primary line of its own.
    order.primary = shared ? order.lines[0] : { id: 0, qty: 1, unitPrice: 1, order };
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

describe('adversary 108: one line at two places of the answer, found by identity', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv108_gql_shared_place', {
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

  const twice = async (key: string, shared: boolean) => {
    const query = `mutation { importOrder(n: 3, shared: ${shared}) { id primary { id position } lines { id position } } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('TWO PLACES', first.text, again.text);
    return { first, again };
  };

  it('control: a primary line of its own replays the same data', async () => {
    const { first, again } = await twice('adv108-two-places-control', false);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.lines.map((l: { position: number }) => l.position)).toEqual([
      1, 2, 3,
    ]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('one line at two places replays the same positions', async () => {
    const { first, again } = await twice('adv108-two-places', true);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.primary.position).toBe(1);
    expect(first.body.data.importOrder.lines.map((l: { position: number }) => l.position)).toEqual([
      1, 2, 3,
    ]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
