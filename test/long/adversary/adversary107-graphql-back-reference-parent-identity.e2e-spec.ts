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
 * Adversary 107 (graphql): the shared parent graph (round 106) gives a replay's resolvers one
 * `order` again (`line.order === otherLine.order`), but the parent a replay hands to a line's
 * `@ResolveField()` is a NEW object built from the line's wire fields and its `__parent` node
 * (wire-value.ts `fromWire`: `value` made fresh, the node's members copied onto it), while
 * `line.order.lines[i]` is the graph's node itself. At the first call `line.order.lines[i]`
 * IS the line the resolver is given (an ORM loads both sides of a relation so); on a replay
 * it never is. Ordinary ORM code that finds a line among its order's lines by identity
 * (`indexOf`, `includes`, `filter(l => l !== line)`) answers differently on the replay.
 *
 * User code: `@ObjectType() Order { id; lines: [Line] }`, `@ObjectType() Line { id }` (its
 * `order` back-reference is no field, as TypeORM/MikroORM load it);
 * `@ResolveField(() => Int) position(@Parent() line) { return line.order.lines.indexOf(line) + 1 }`
 * and `siblings(@Parent() line) { return line.order.lines.filter((l) => l !== line).length }`;
 * `@Mutation(() => Order) @Idempotent() importOrder(n)` returning the order whose lines point
 * back at it; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `writeParents` -> kept-data.ts `keepAll` ->
 * typed-graph.ts `writeGraphs` (the line's own data is a root; the line object reached again
 * through `order.lines` is another node, or the root, but never the replay's parent);
 * replay: run-field.ts -> wire-value.ts `fromWire` (a fresh `value`, `restoreData(stored[PARENT],
 * shared)` copied onto it member by member) -> kept-data.ts `sharedReader`.
 *
 * Docs quote (docs/guides/graphql.md): "a replay's resolvers get one object there again
 * (`line.order === otherLine.order`, as at the first call)" and "A replay's resolvers get the
 * same values as the first call's, and the answer is the same bytes".
 *
 * Severity: high (a wrong answer replayed: positions 1..n become 0, siblings n-1 becomes n).
 *
 * Fails now (un-skipped): first answer `position` 1, 2, 3 and `siblings` 2; the replay
 * answers `position` 0, 0, 0 and `siblings` 3.
 *
 * Controls: the same app, a resolver that reads only values through the back-reference
 * (`line.order.lines.length`, `line.qty * line.unitPrice`) replays the same data (the `replayed` extension aside).
 *
 * Suggested fix: where a parent's own object is reached again inside the shared graph (the
 * root of its `__parent` is the object `order.lines[i]` holds), make the replay's parent that
 * very object: build the parent's fields ONTO the graph's root node (as its own members, in
 * the first call's key order) rather than copying the node's members onto a fresh object, so
 * the graph's references to the parent are the parent; or say in the log and docs that a
 * parent's identity inside its own data is not kept.
 *
 * Fixed (session of 2026-12-07): a parent's `__parent` names, beside its data's node, the node
 * of its own object where the shared graph holds it too (`{ p, s }`, parent-graph.ts); a
 * replay builds the parent as before and moves it onto that node (parent-identity.ts
 * `ontoNode`, once per node per replay), so `line.order.lines[i]` is the replay's parent.
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
  async importOrder(@Args('n', { type: () => Int }) n: number): Promise<OrderRow> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const order = { id: rows[0].id, lines: [] } as unknown as OrderRow;
    for (let i = 1; i <= n; i += 1) {
      order.lines.push({ id: i, qty: 2, unitPrice: i, order });
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

describe('adversary 107: a parent found by identity in its own back-reference', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv107_gql_parent_identity', {
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

  const twice = async (key: string, fields: string) => {
    const query = `mutation { importOrder(n: 3) { id lines { id ${fields} } } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('IDENTITY', first.text, again.text);
    const { rows } = await fixture.admin.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM orders',
    );
    return { first, again, orders: rows[0].n };
  };

  it('control: values read through the back-reference replay the same data', async () => {
    const { first, again } = await twice('adv107-identity-control', 'subtotal lineCount');
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.lines[2]).toEqual({ id: 3, subtotal: 6, lineCount: 3 });
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a line found among its order lines by identity replays the same answer', async () => {
    const { first, again } = await twice('adv107-identity-position', 'position siblings');
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.lines.map((l: { position: number }) => l.position)).toEqual([
      1, 2, 3,
    ]);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
