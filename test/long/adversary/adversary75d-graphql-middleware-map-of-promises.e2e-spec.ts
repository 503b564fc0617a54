import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 75d: a list field behind field middleware whose input is a `Map` of Promises (each
 * line loaded by its SKU, DataLoader style) is answered at the first call and replayed as
 * errors: the stored Map holds each Promise as `{}`, the replay's middleware maps it to a list
 * of empty objects, and GraphQL answers `Line.sku` (non-null) null, so `createOrder` is null.
 *
 * The app: `Order { id lines: [Line!]! }`, `lines` behind Nest's field middleware `fromMap`
 * (`const lines = await next(); return lines instanceof Map ? [...lines.values()] : lines`),
 * the resolver returning `{ id, lines: new Map(skus.map((sku) => [sku, loadLine(sku)])) }`
 * where `loadLine` is an async read of the catalogue row (GraphQL awaits each item of a list);
 * Apollo on Express. The client selects `{ id lines { sku description } }`.
 *
 * Why: the Map is no list, so `fitsListType` (lib/graphql/middleware-input.ts) is false and
 * `walkValue` (lib/graphql/wire-value.ts) keeps it as it is: `withGetterFields`
 * (lib/graphql/middleware-extras.ts) copies the Map, its values left as they are (a Promise
 * has none of `Line`'s getters), and `keepData` (lib/graphql/kept-data.ts) writes each
 * Promise as an instance of a class, its own data: `{}`. Nothing awaits them, as the walk
 * awaits a Promise where the field is walked with its type ("a lazy relation's Promise
 * awaited"). The loss is logged; the first answer reads the resolver's own Map and succeeds.
 *
 * Expected (docs/guides/graphql.md): the field is stored as its middleware's input, "the
 * property as Nest reads it (... a lazy relation's Promise awaited)", "a jsonb record or a
 * `Map` it maps to a list) is kept as it is ... the items of a `Map`, a `Set` or a record kept
 * with the fields their class computes", and "on a replay it runs again on that stored input";
 * a replay answers what the first call answered.
 *
 * Control: the same Map with each line loaded first (`await Promise.all`): answered and
 * replayed; passes.
 *
 * Severity: low-medium (every replay of such a mutation an error where the first call
 * answered; a loss is logged).
 *
 * Fails now: the replay is `{ data: { createOrder: null }, errors: [ "Cannot return null for
 * non-nullable field Line.sku." ... ] }` where the first answer had the lines.
 *
 * Suggested fix: in a kept container, await its Promise values (as the walk awaits a field's
 * Promise, and GraphQL each list item's) before keeping it, or refuse/log it as not
 * replayable.
 * Fixed: lib/graphql/wire-value.ts `walkValue` awaits a kept container's Promise values with
 * lib/graphql/middleware-input.ts `settledContainer` (Map, Set, plain record) before keeping it;
 * one rejecting is the field's read error (`failRead`).
 */
let pool: Pool;

/** Nest's field middleware: the order's lines, kept by SKU, as a list. */
const fromMap: FieldMiddleware = async (_ctx, next) => {
  const lines: unknown = await next();
  return lines instanceof Map ? [...(lines as Map<string, unknown>).values()] : lines;
};

@ObjectType()
class Line {
  @Field()
  sku!: string;

  @Field()
  description!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line], { middleware: [fromMap] })
  lines!: Map<string, Line | Promise<Line>>;
}

async function loadLine(sku: string): Promise<Line> {
  const { rows } = await pool.query<Line>('SELECT sku, description FROM catalogue WHERE sku = $1', [
    sku,
  ]);
  return rows[0];
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(
    @Args('loaded', { type: () => Boolean, defaultValue: false }) loaded: boolean,
  ): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const skus = ['A-1', 'B-2'];
    const lines = new Map<string, Line | Promise<Line>>(skus.map((sku) => [sku, loadLine(sku)]));
    // The control: each line loaded before it is answered.
    if (loaded) {
      for (const [sku, line] of lines) lines.set(sku, await line);
    }
    return { id: rows[0].id, lines };
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

describe('adversary 75d: a Map of Promises behind list middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75d_gql_mw_map_promises', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE catalogue (sku text PRIMARY KEY, description text NOT NULL)',
        );
        await admin.query(`INSERT INTO catalogue VALUES ('A-1', 'Anvil'), ('B-2', 'Bucket')`);
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
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createOrder'] } },
  });

  const lines = [
    { sku: 'A-1', description: 'Anvil' },
    { sku: 'B-2', description: 'Bucket' },
  ];

  it('control: the Map of loaded lines, answered and replayed', async () => {
    const query = 'mutation { createOrder(loaded: true) { id lines { sku description } } }';
    const first = await post('adv75d-mw-map-promises-c', query);
    expect(first.body).toEqual({ data: { createOrder: { id: expect.any(Number), lines } } });
    const again = await post('adv75d-mw-map-promises-c', query);
    expect(again.body).toEqual(replayOf(first));
  });

  it('the Map of Promises: answered, and replayed the same', async () => {
    const query = 'mutation { createOrder { id lines { sku description } } }';
    const first = await post('adv75d-mw-map-promises-a', query);
    expect(first.body).toEqual({ data: { createOrder: { id: expect.any(Number), lines } } });
    const again = await post('adv75d-mw-map-promises-a', query);
    // Fails: createOrder null, "Cannot return null for non-nullable field Line.sku."
    expect(again.body).toEqual(replayOf(first));
  });
});
