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
 * Adversary 76: the extras budget (256 KiB of unselected fields per stored answer, within the
 * route's `maxResponseBytes`) bounds the unselected fields of a middleware input's items when
 * the input is an array, not when it is a `Map` (or a `Set`, or a record) the middleware maps
 * to the list: the container is kept whole, every item's unselected columns with it. Lines
 * loaded with their product photo (`SELECT *`), kept by SKU in a Map, make the stored answer
 * larger than the route's 1 MiB: the first call answers `response_too_large`, the order rolls
 * back, and that 500 is the key's answer for good, where the app answers without the library.
 *
 * The user code (Apollo on Express):
 *
 *   @ObjectType() class Line { @Field() sku!: string; @Field(() => Int) qty!: number; @Field() photo!: string; }
 *   const fromMap: FieldMiddleware = async (_ctx, next) => {
 *     const lines = await next();
 *     return lines instanceof Map ? [...lines.values()] : lines;
 *   };
 *   @ObjectType() class Order { @Field(() => Int) id; @Field(() => [Line], { middleware: [fromMap] }) lines; }
 *   @Mutation(() => Order) @Idempotent() createOrder() {
 *     insert; const rows = await pool.query('SELECT * FROM catalogue ...'); // each with a ~400 KB photo
 *     return { id, lines: new Map(rows.map((row) => [row.sku, row])) };
 *   }
 *
 * and the client selects `{ id lines { sku qty } }` (not `photo`).
 *
 * Why: `fitsListType` (lib/graphql/middleware-input.ts) is false for a Map, so `walkValue`
 * (lib/graphql/wire-value.ts) keeps it with `keepInput(withGetterFields(...))`, whole, in
 * `kept`; only objects walked with their type go to `walk.pending`, whose unselected fields
 * `placeExtras` fits within the budget (`fitExtras`). The Map's items are never walked, so
 * their photos are counted against `maxResponseBytes` in full (run-field.ts:
 * `answer.body.length > route.maxResponseBytes`).
 *
 * What the docs promise (docs/guides/graphql.md): "Those unselected fields are kept within 256
 * KiB per stored answer, counted as the UTF-8 bytes they are stored as (a `Map` or a `Set` by
 * its entries ...), and within what the route's `maxResponseBytes` leaves after the answer
 * without them, so that they never make an answer too large to store that the app answers
 * without the library: past that, a field (a large `avatar` column) is stored without them";
 * "an unselected large field does not count against `maxResponseBytes`".
 *
 * Control: the same lines as an array behind the same middleware: the photos left out past the
 * budget, answered and replayed the same, the order committed once.
 *
 * Severity: medium (a false error stored: the order the app would take rolled back, and
 * `response_too_large` answered to every retry of the key).
 *
 * Fails now: the first answer is `data: { createOrder: null }` with "The field's answer is
 * larger than this mutation's maxResponseBytes (1048576 bytes)", the order rolled back.
 *
 * Suggested fix: count a kept container's items' unselected fields against the same budget
 * (walk each item with the item type for its selected fields, keep the rest through
 * `fitExtras`), as the array's are.
 *
 * Fixed (round 78): the library no longer reads nor stores a field middleware's input, and
 * never runs the middleware on a replay. The answer commits with the resolver's effects as
 * before (lib/graphql/run-field.ts `settle`), its middleware outputs pending; the operation's
 * answer hook (lib/graphql/replay-marker.ts: Apollo `willSendResponse`, Mercurius
 * `onResolution`) takes each middleware field's output from the answer's data, as the client
 * got it (masked by an outer serializer), and completes the stored answer with one fenced
 * UPDATE (`ClaimStore.completeAnswer`, lib/graphql/output-paths.ts `storeOutputsOf`). On a
 * replay a wrapper on each middleware field of the schema (lib/graphql/middleware-outputs.ts
 * `answerOutputsOf`) answers the stored output for its path, its scalars through
 * `parseValue()`; a replay meeting the outputs pending waits for them, bounded, then answers
 * `field_output_pending`. middleware-input.ts and middleware-extras.ts are gone.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field()
  sku!: string;

  @Field(() => Int)
  qty!: number;

  @Field()
  photo!: string;
}

/** Nest's field middleware: the order's lines, kept by SKU, as a list. */
const fromMap: FieldMiddleware = async (_ctx, next) => {
  const lines: unknown = await next();
  return lines instanceof Map ? [...(lines as Map<string, Line>).values()] : lines;
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line], { middleware: [fromMap] })
  lines!: Map<string, Line> | Line[];
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
    @Args('asArray', { type: () => Boolean, defaultValue: false }) asArray: boolean,
  ): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const lines = (await pool.query<Line>('SELECT * FROM catalogue ORDER BY sku')).rows;
    return {
      id: rows[0].id,
      lines: asArray ? lines : new Map(lines.map((line) => [line.sku, line])),
    };
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

describe('adversary 76: a Map behind list middleware kept whole, its items outside the budget', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_map_unbudgeted', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE catalogue (sku text PRIMARY KEY, qty int NOT NULL, photo text NOT NULL)',
        );
        // Three lines, each with a 400 KB photo: 1.2 MB in all, past the default 1 MiB.
        await admin.query(
          `INSERT INTO catalogue SELECT 'SKU-' || n, n, repeat('p', 400000) FROM generate_series(1, 3) n`,
        );
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
      .timeout(30_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createOrder'] } },
  });

  const count = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM orders')).rows[0].n,
    );

  const lines = [
    { sku: 'SKU-1', qty: 1 },
    { sku: 'SKU-2', qty: 2 },
    { sku: 'SKU-3', qty: 3 },
  ];

  it('control: the lines as an array, answered and replayed', async () => {
    const query = 'mutation { createOrder(asArray: true) { id lines { sku qty } } }';
    const before = await count();
    const first = await post('adv76-mw-map-unbudgeted-c', query);
    expect(first.body).toEqual({ data: { createOrder: { id: expect.any(Number), lines } } });
    const again = await post('adv76-mw-map-unbudgeted-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  }, 60_000);

  it('the lines as a Map: answered and replayed', async () => {
    const query = 'mutation { createOrder { id lines { sku qty } } }';
    const before = await count();
    const first = await post('adv76-mw-map-unbudgeted-a', query);
    // Fails: createOrder null, response_too_large, the order rolled back.
    expect(first.body).toEqual({ data: { createOrder: { id: expect.any(Number), lines } } });
    const again = await post('adv76-mw-map-unbudgeted-a', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  }, 60_000);
});
