import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import {
  Args,
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
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 84 (graphql): on Mercurius with `jit`, a middleware field under a `@ResolveField()`
 * value (`Order.lines`, read anew on every replay; each `Line.label` behind field middleware)
 * is answered on a replay run compiled from the first answer's stored outputs by position,
 * not by running its middleware on the fresh value: a line added to the order since the first
 * call shifts the list, so the replay answers the new line (id 4) with the first line's label (a nullable label: no error there),
 * and the last line's label `field_not_stored` ("was not selected by the first call
 * with this idempotency key ... use a new key for a new operation"), though the first call
 * selected it. Run uncompiled (graphql-js: the document's first run), the same replay answers
 * each line its own label, as the docs say.
 *
 * User code: `@ResolveField(() => [Line]) lines(@Parent() order)` reads the order's lines
 * (newest first); `Line { id; @Field({ middleware: [shout] }) label }` (Nest field middleware,
 * the label in capitals); `createOrder` with `@Idempotent()` makes the order and its first
 * line; `addLine` (not idempotent) adds one later. `MercuriusDriver` with `jit: 1` (compile a
 * document from its second run), on Fastify. The client retries `createOrder` with the same
 * operation text.
 *
 * Code path: lib/graphql/middleware-outputs.ts `answerOutputsOf`'s wrapper ->
 * `appResolvedBetween`: a step's type is read from graphql-js' `info.path[].typename`, which
 * graphql-jit's path (`{ prev, key, type }`) does not have (`typename === undefined:
 * continue`), so no field the app resolves is known to be between the mutation and the label:
 * `viaApp` is false, and `outputAt` (lib/graphql/output-paths.ts) answers the stored output at
 * `lines.0.label` for whatever line is now at 0, and `unstored` at `lines.1.label`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A middleware field under such a
 * resolver's value (a `@ResolveField()` list of lines, each `label` behind middleware) is that
 * value's, read anew on a replay: its middleware runs, as on a query"; Mercurius' `jit` is
 * a documented driver setting ("Under Mercurius' `jit`, whose compiled run (a document's
 * second, a replay's as a rule)").
 *
 * Severity: high: a replay answers a line with another line's label, no error (a value no
 * answer ever paired), and refuses a field the first call selected with advice to use a new
 * key (a client that follows it places the order again).
 *
 * Fails now: the compiled replay answers `data: null` (label, the list's items and
 * `createOrder` are non-null) with `field_not_stored` at `createOrder.lines.1.label` ("was not
 * selected by the first call ... use a new key for a new operation"), the replay marker on;
 * the control (the same retry as a new document text, run uncompiled) answers
 * `lines: [{ id: 4, label: "SECOND" }, { id: 3, label: "FIRST" }]`. (With `label` nullable, checked by
 * hand: `lines: [{ id: 4, label: "FIRST" }, { id: 3, label: null }]`, the first line's label
 * on the new line, by position, and `field_not_stored` at `lines.1.label`.)
 *
 * Suggested fix: tell a field the app resolves between the mutation and the middleware field
 * without graphql-js' `typename` (graphql-jit): by the named steps and the schema (walk the
 * field names from the mutation's type down, through the members the replay told), or note at
 * the first answer which stored output paths were under an app-resolved field and never
 * answer those from storage.
 *
 * Fixed (session of 2026-12-06, third): `appResolvedBetween` (lib/graphql/middleware-outputs.ts)
 * no longer reads graphql-js' `typename`: it walks the path's steps through the operation and
 * the schema with `namedSteps` (lib/graphql/named-path.ts, now telling each step's object type
 * and field to an `onField` callback: the root type, then each field's own type, each member
 * that selects the key under a union or interface), and asks `fieldResolution` of each field
 * between the mutation and the middleware field. Under graphql-jit `lines` is found the app's,
 * so the label's middleware runs on the fresh value, as uncompiled. Spec: named-path.spec.ts.
 * Docs: docs/guides/graphql.md, "Field middleware".
 */
let pool: Pool;

/** Nest's field middleware: the label in capitals. */
const shout: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string | null;
  return value === null ? null : value.toUpperCase();
};

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  @Field({ middleware: [shout] })
  label!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    await pool.query("INSERT INTO order_lines (order_id, label) VALUES ($1, 'first')", [
      rows[0].id,
    ]);
    return { id: rows[0].id };
  }

  /** Not idempotent: a line added to the order later. */
  @Mutation(() => Boolean)
  async addLine(
    @Args('orderId', { type: () => Int }) orderId: number,
    @Args('label') label: string,
  ): Promise<boolean> {
    await pool.query('INSERT INTO order_lines (order_id, label) VALUES ($1, $2)', [orderId, label]);
    return true;
  }

  /** The order's lines, newest first: read anew on every call. */
  @ResolveField(() => [Line])
  async lines(@Parent() order: Order): Promise<Line[]> {
    const { rows } = await pool.query<Line>(
      'SELECT id, label FROM order_lines WHERE order_id = $1 ORDER BY id DESC',
      [order.id],
    );
    return rows;
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      autoSchemaFile: true,
      graphiql: false,
      jit: 1,
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 84: Mercurius jit, a middleware field under a @ResolveField() value on a compiled replay', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv84_gql_jit_mw_resolve_field', {
      module: OrdersModule,
      max: 6,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
        await admin.query(
          'CREATE TABLE order_lines (id serial PRIMARY KEY, order_id int NOT NULL, label text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string | undefined, query: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(20_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send(JSON.stringify({ query }));
  };

  const operation = (name: string) => `mutation ${name} { createOrder { id lines { id label } } }`;

  const run = async (key: string, first: string, retry: string) => {
    const answer = await post(key, operation(first));
    expect(answer.body.errors).toBeUndefined();
    const orderId = answer.body.data.createOrder.id as number;
    const [line] = answer.body.data.createOrder.lines as { id: number }[];
    expect(answer.body.data.createOrder.lines).toEqual([{ id: line.id, label: 'FIRST' }]);
    // A line added to the order since.
    const added = await post(
      undefined,
      `mutation { addLine(orderId: ${orderId}, label: "second") }`,
    );
    expect(added.body).toEqual({ data: { addLine: true } });
    const again = await post(key, operation(retry));
    expect(again.body).toEqual({
      data: {
        createOrder: {
          id: orderId,
          lines: [
            { id: line.id + 1, label: 'SECOND' },
            { id: line.id, label: 'FIRST' },
          ],
        },
      },
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: the retry a document of its own (its first run, uncompiled): each line its own label', async () => {
    await run('adv84-jit-rf-fresh', 'PlaceFresh', 'PlaceFreshRetry');
  });

  it('the retry the same document (compiled, jit: 1): each line its own label', async () => {
    await run('adv84-jit-rf-same', 'PlaceSame', 'PlaceSame');
  });
});
