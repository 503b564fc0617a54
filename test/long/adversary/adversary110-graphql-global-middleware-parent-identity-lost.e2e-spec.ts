import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
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
 * Fixed (session of 2026-12-07, fourth): a middleware output's noted parent now names its own
 * object's node where the outputs' graph holds it (`s`, app-parents.ts `keptParents`, as the
 * value's `__parent` does), and a replay's `outputValue` adopts that node (`read.adopt` and
 * parent-identity.ts `ontoNode`, the value path's own): `indexOf(line)` and `primary === line`
 * answer as at the first call.
 *
 * Adversary 110 (graphql): with a global field middleware (Nest's own example: a logger in
 * `buildSchemaOptions.fieldMiddleware`, which puts every field behind middleware), a replay's
 * `@ResolveField()` parents are no longer the objects their own data reaches back to: an
 * order's lines, each with its `order` back-reference (as an ORM loads both sides), answer
 * `position` (`line.order.lines.indexOf(line) + 1`) 1, 2, 3 at the first call and 0, 0, 0
 * on every replay, and `isPrimary` (`line.order.primary === line`) true for the first line,
 * false on the replay. The lines' data is kept (the same app's `sku` and `siblings` counts
 * replay as they were): only the identity the library promises is lost. Without the global
 * middleware the same app replays 1, 2, 3 (adversary 107's fix: the parent adopted as its
 * node of the shared graph); a middleware output's parents (app-parents.ts `notedParent`,
 * written into the outputs' one graph) never name their own object's node, so no replay
 * adopts it.
 *
 * User code: `Order { id; primary: Line; lines: [Line] }`, `Line { id }` with `sku` and the
 * `order` back-reference no fields; `@ResolveField() position(@Parent() line) { return
 * line.order.lines.indexOf(line) + 1 }`, `isPrimary(@Parent() line) { return
 * line.order.primary === line }`, `sku(@Parent() line)`; `@Mutation() @Idempotent()
 * placeOrder()`; `GraphQLModule.forRoot({ driver: ApolloDriver, autoSchemaFile: true,
 * buildSchemaOptions: { fieldMiddleware: [logger] } })` with `const logger: FieldMiddleware =
 * async (ctx, next) => { logged.push(ctx.info?.fieldName ?? ""); return next(); }` (Nest's docs'
 * field middleware example). The client selects `lines { id position isPrimary sku }`.
 *
 * Code path: lib/graphql/middleware-outputs.ts (every field behind middleware: its output
 * stored at the answer) -> app-parents.ts `notedParent` (each `@ResolveField()` parent's own
 * data written into the outputs' graph as a node of its own, `parentRef(node)`, no `s`) ->
 * replay `parentData`: the parent rebuilt from its node, a copy apart from the `order.lines`
 * items the graph holds (each line reached through `order` is another node).
 *
 * Docs quote (docs/guides/graphql.md): "Where the parent itself is reached back through its
 * own data (`line.order.lines[i]`, as an ORM loads both sides of a relation ...), a replay's
 * parent is that very object, as at the first call (`line.order.lines.indexOf(line)` answers
 * the same)"; for middleware outputs' parents: "an object several of them reach, each
 * `line.order` the one order with all its lines, is written once ... and is one object again
 * on a replay"; "A replay's resolvers get the same values as the first call's, and the answer
 * is the same bytes".
 *
 * Severity: high (every replay answers other bytes than the first answer: positions 0, 0, 0,
 * `isPrimary` false), for any app with a global field middleware.
 *
 * Fails now (un-skipped): first `lines` `[{id:1,position:1,isPrimary:true,sku:"s1"},
 * {id:2,position:2,isPrimary:false,...},{id:3,position:3,...}]`; the replay `position` 0 at
 * each line, `isPrimary` false at the first. Also so with a getter field selected at
 * `primary` and `lines`, and on the `primary` place (seen by review with a probe).
 *
 * Controls: the same app, the client selecting `lines { id sku siblings }` (the parent's own
 * data and `line.order.lines.length`, no identity), replays the same bytes.
 *
 * Suggested fix: give a noted parent's ref its own object's node where the outputs' graph
 * holds it (`parentRef(node, source)`, as `writeParents` does for `__parent`), and adopt it
 * on a replay (`ontoNode`), so the middleware path keeps the identity the value path keeps.
 */
let pool: Pool;
const logged: string[] = [];

const logger: FieldMiddleware = async (ctx, next) => {
  logged.push(ctx.info?.fieldName ?? '');
  return next();
};

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  sku!: string;

  order!: Order;
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

@Resolver(() => Line)
class LinesResolver {
  @ResolveField(() => Int)
  position(@Parent() line: Line): number {
    return line.order.lines.indexOf(line) + 1;
  }

  @ResolveField(() => Boolean)
  isPrimary(@Parent() line: Line): boolean {
    return line.order.primary === line;
  }

  @ResolveField(() => String, { name: 'sku' })
  skuOf(@Parent() line: Line): string {
    return line.sku;
  }

  @ResolveField(() => Int)
  siblings(@Parent() line: Line): number {
    return line.order.lines.length - 1;
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
  async placeOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const order = new Order();
    order.id = rows[0].id;
    order.lines = [1, 2, 3].map((id) => Object.assign(new Line(), { id, sku: `s${id}`, order }));
    order.primary = order.lines[0];
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
      buildSchemaOptions: { fieldMiddleware: [logger] },
    }),
  ],
  providers: [OrdersResolver, LinesResolver],
})
class OrdersModule {}

describe('adversary 110: a global field middleware loses the replay parents identity', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv110_gql_global_mw_identity', {
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

  const twice = async (key: string, selection: string) => {
    const first = await post(key, `mutation { placeOrder ${selection} }`);
    const again = await post(key, `mutation { placeOrder ${selection} }`);
    // eslint-disable-next-line no-console
    console.log('MIDDLEWARE', first.text, again.text);
    return { first, again };
  };

  it('control: the parents data (no identity) replays the same bytes', async () => {
    const { first, again } = await twice('adv110-mw-control', '{ id lines { id sku siblings } }');
    expect(first.body.errors).toBeUndefined();
    expect(logged.length).toBeGreaterThan(0);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a line reached back through its order is its replay parent', async () => {
    const { first, again } = await twice(
      'adv110-mw-identity',
      '{ id lines { id position isPrimary sku } }',
    );
    expect(first.body.errors).toBeUndefined();
    expect(
      first.body.data.placeOrder.lines.map((line: { position: number }) => line.position),
    ).toEqual([1, 2, 3]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
