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
 * Adversary 81 (graphql): a middleware field under a `@ResolveField()` list is replayed by the
 * list's index, although the docs say the field resolver reads anew on a replay: once the list
 * changed (a line added by another request), the retry that sends the first call's very
 * operation answers each line its neighbour's stored label, and the last line
 * `field_not_stored` ("was not selected by the first call ... use a new key").
 *
 * The app: `Order { id lines: [Line!]! }`, `lines` a `@ResolveField()` (`SELECT ... FROM lines
 * WHERE order_id = $1 ORDER BY id DESC`, the docs' own advice: "keep field resolvers to reads
 * (a relation ...)"), `Line { id label }` with `label` behind Nest's field middleware `upper`
 * (or a global `fieldMiddleware` such as Nest's `loggerMiddleware` recipe). `createOrder` with
 * `@Idempotent()`; Apollo on Express. A line is added to the order (another mutation, another
 * client) before the first call's client retries.
 *
 * Why: `answerOutputsOf` (lib/graphql/middleware-outputs.ts) answers every middleware field
 * whose response-key path is under a replayed mutation (`replayedOutputAt` / `outputAt`,
 * lib/graphql/output-paths.ts, by `relativeKey(replay.root, path)`), also where a field with a
 * resolver of the app's own (`fieldResolution(...) === 'app'`) is between them: its parent
 * is the field resolver's fresh value, but its output is the stored one at that list index;
 * an index the first answer did not have is `unstored`, so `notStoredField`.
 *
 * Docs (docs/guides/graphql.md): "A field that has a `@ResolveField()` of its own ... is not
 * refused: it runs again on a replay, as it does for every replay"; "A `@ResolveField()` under
 * the mutation ... GraphQL runs it ... again at every replay ... what it reads is read anew";
 * "A retry that selects the same fields ... gets the stored values"; and `field_not_stored`:
 * "was not selected by the first call".
 *
 * Control (passes): the same app without the middleware on `label`: the retry answers the
 * three lines, each with its own label, read anew.
 *
 * Severity: high (a replay gives a line another line's label, no error; and an honest retry
 * of the very same operation is told it selected a field the first call did not, and to use a
 * new key, which runs the order again).
 *
 * Fails now: the retry answers lines `[{ id: 3, label: 'SECOND' }, { id: 2, label: 'FIRST' },
 * { id: 1, label: null }]` (labels shifted) and a `field_not_stored` error at
 * `createOrder.lines.2.label` (null on `Line!` nulls the line and the list; `createOrder` null).
 *
 * Suggested fix: answer stored outputs only where each step between the mutation and the
 * middleware field is the mutation's stored value (no field the app resolves, `'app'`, on the
 * way); under such a field, run the middleware as on any query (its parent is read anew), as
 * the docs say of field resolvers.
 *
 * Fixed: a middleware field under a field the app resolves (a `@ResolveField()` between it and the
 * mutation, read anew on every replay) runs its middleware on the fresh value, as on any query
 * (`appResolvedBetween`, lib/graphql/middleware-outputs.ts; `outputAt`'s `viaApp`,
 * output-paths.ts).
 */
let pool: Pool;

/** Nest's field middleware: the text in capitals. */
const upper: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string | null;
  return value === null ? null : value.toUpperCase();
};

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  @Field({ middleware: [upper] })
  label!: string;

  @Field()
  plain!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line])
  lines?: Line[];
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    await pool.query("INSERT INTO lines (order_id, label) VALUES ($1, 'first'), ($1, 'second')", [
      rows[0].id,
    ]);
    return { id: rows[0].id };
  }

  @ResolveField(() => [Line])
  async lines(@Parent() order: Order): Promise<Line[]> {
    const { rows } = await pool.query<{ id: number; label: string }>(
      'SELECT id, label FROM lines WHERE order_id = $1 ORDER BY id DESC',
      [order.id],
    );
    return rows.map((row) => ({ ...row, plain: row.label }));
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

describe('adversary 81: a middleware field under a @ResolveField() list', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_under_resolve', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
        await admin.query(
          'CREATE TABLE lines (id serial PRIMARY KEY, order_id int NOT NULL, label text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const replayed = { idempotency: { replayed: ['createOrder'] } };

  it('control: a field without middleware under the field resolver is read anew', async () => {
    const query = 'mutation { createOrder { id lines { id plain } } }';
    const first = await post('adv81-resolve-ok', query);
    expect(first.body.errors).toBeUndefined();
    const orderId = first.body.data.createOrder.id as number;
    expect(first.body.data.createOrder.lines.map((l: { plain: string }) => l.plain)).toEqual([
      'second',
      'first',
    ]);
    await pool.query("INSERT INTO lines (order_id, label) VALUES ($1, 'third')", [orderId]);
    const again = await post('adv81-resolve-ok', query);
    expect(again.body.errors).toBeUndefined();
    expect(again.body.extensions).toEqual(replayed);
    expect(again.body.data.createOrder.lines.map((l: { plain: string }) => l.plain)).toEqual([
      'third',
      'second',
      'first',
    ]);
  });

  it('a middleware field under it: each line its own label, no field_not_stored', async () => {
    const query = 'mutation { createOrder { id lines { id label } } }';
    const first = await post('adv81-resolve-mw', query);
    expect(first.body.errors).toBeUndefined();
    const orderId = first.body.data.createOrder.id as number;
    const [second, firstLine] = first.body.data.createOrder.lines as { id: number }[];
    expect(first.body.data.createOrder.lines).toEqual([
      { id: second.id, label: 'SECOND' },
      { id: firstLine.id, label: 'FIRST' },
    ]);
    // Another request adds a line to the order before the client retries.
    const { rows } = await pool.query<{ id: number }>(
      "INSERT INTO lines (order_id, label) VALUES ($1, 'third') RETURNING id",
      [orderId],
    );
    const again = await post('adv81-resolve-mw', query);
    // Fails: a field_not_stored error at createOrder.lines.2.label, createOrder null (and,
    // where the list is nullable, the labels shifted by one line).
    expect(again.body.errors).toBeUndefined();
    expect(again.body.data.createOrder.lines).toEqual([
      { id: rows[0].id, label: 'THIRD' },
      { id: second.id, label: 'SECOND' },
      { id: firstLine.id, label: 'FIRST' },
    ]);
  });
});
