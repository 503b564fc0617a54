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
 * Adversary 75c: a list field behind Nest field middleware whose raw value is a `Map` of
 * class instances (order lines by SKU), each with a computed `@Field()` getter (`totalCents`),
 * answers the first call and fails every replay: the replay's lines come back as plain data,
 * the getter field gone, and the non-null `totalCents` nulls the whole mutation.
 *
 * The app: `Order { id lines: [OrderLine!]! }`, `lines` a `Map<string, OrderLine>` behind the
 * middleware `linesOf` (`const bySku = await next(); return [...bySku.values()]`), the line
 * class computing its total:
 *
 *   @ObjectType() class OrderLine {
 *     @Field() sku!: string;
 *     @Field(() => Int) qty!: number;
 *     @Field(() => Int) unitCents!: number;
 *     @Field(() => Int) get totalCents(): number { return this.qty * this.unitCents; }
 *   }
 *
 * `createOrder` with `@Idempotent()`, Apollo on Express, selecting `lines { sku totalCents }`.
 *
 * Why: the round 75b fix (ab65f75) keeps a list field's middleware input that is no array
 * as it is (walkValue's `keepInput` under `!fitsListType(...)`, lib/graphql/wire-value.ts):
 * it is never walked with the field's type, so the selected `totalCents` of each line is never
 * read; keepData (kept-data.ts, plainCopy) keeps each `OrderLine` as its own data (`sku`,
 * `qty`, `unitCents`), its getter lost (logged as a loss). On a replay the middleware maps
 * the stored Map's plain lines to the list and GraphQL's default resolver reads
 * `line.totalCents`: undefined, on an `Int!`, so the error propagates to the nullable
 * `createOrder`: `data: { createOrder: null }` with "Cannot return null for non-nullable field
 * OrderLine.totalCents." (the order committed, its answer not the one stored for it).
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "Field middleware wraps
 * Nest's read of the property, so the field itself is stored as its middleware's input ...
 * a jsonb record or a `Map` it maps to a list) kept as it is ... on a replay it runs again on
 * that stored input", and, for the whole page, a replay is the first answer. The stated loss
 * ("An instance of a class in that input comes back as plain data of its own (its fields, not
 * its methods or getters ...)") is about what the middleware reads; here the getter is a
 * selected field of the answer, which every other path of the walk reads and stores
 * (`ACCESSORS`), so the replay answers it.
 *
 * Control: the same lines as an array (the middleware sorts them): walked with the type, the
 * getter read and stored: first answer and replay equal; pass. And the Map without
 * `@Idempotent()`: answered.
 *
 * Severity: high (every retry of a committed order gets data null with an error for a field
 * the first answer had; a client reading that as a failure may order again under a new key).
 *
 * Fails now: the replay is `{ createOrder: null }` with the error "Cannot return null for
 * non-nullable field OrderLine.totalCents.", the first answer the lines with their totals.
 *
 * Suggested fix: where a list field's middleware input is a Map, a Set or a record, walk each
 * of its values that is an object of the list's item type with that type (as the array case
 * does), storing the selected fields it gives through getters, and keep the container's shape
 * around them; or store the middleware's output (run the field's resolver) for such inputs.
 *
 * Fixed: a list field's middleware input that is a container (a `Map`, a `Set`, a record) is kept
 * with each item given, as own data, the fields of the item type its class computes
 * (`totalCents`), read once: lib/graphql/middleware-extras.ts `withGetterFields`, called from
 * walkValue (lib/graphql/wire-value.ts) where `fitsListType` is false.
 */
let pool: Pool;

@ObjectType()
class OrderLine {
  @Field()
  sku!: string;

  @Field(() => Int)
  qty!: number;

  @Field(() => Int)
  unitCents!: number;

  @Field(() => Int)
  get totalCents(): number {
    return this.qty * this.unitCents;
  }
}

/** Nest's field middleware: the lines keyed by SKU as the list the schema answers. */
const linesOf: FieldMiddleware = async (_ctx, next) => {
  const bySku = (await next()) as Map<string, OrderLine> | OrderLine[];
  return Array.isArray(bySku)
    ? [...bySku].sort((a, b) => a.sku.localeCompare(b.sku))
    : [...bySku.values()];
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [OrderLine], { middleware: [linesOf] })
  lines!: Map<string, OrderLine>;
}

function line(sku: string, qty: number, unitCents: number): OrderLine {
  return Object.assign(new OrderLine(), { sku, qty, unitCents });
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async insert(asArray: boolean): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders (lines) VALUES (2) RETURNING id',
    );
    const lines = new Map([
      ['A-1', line('A-1', 2, 500)],
      ['B-2', line('B-2', 1, 1250)],
    ]);
    // The control: the same lines as an array.
    const value = asArray ? ([...lines.values()] as unknown as Map<string, OrderLine>) : lines;
    return { id: rows[0].id, lines: value };
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  createOrder(
    @Args('asArray', { type: () => Boolean, defaultValue: false }) asArray: boolean,
  ): Promise<Order> {
    return this.insert(asArray);
  }

  @Mutation(() => Order, { nullable: true })
  createOrderUnkeyed(): Promise<Order> {
    return this.insert(false);
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

describe('adversary 75c: a Map of class instances behind a list middleware, a getter field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75c_gql_mw_map_getter', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, lines int NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createOrder'] } },
  });

  const count = async () =>
    Number((await pool.query<{ n: string }>('SELECT count(*) AS n FROM orders')).rows[0].n);

  const lines = [
    { sku: 'A-1', totalCents: 1000 },
    { sku: 'B-2', totalCents: 1250 },
  ];

  it('control: the lines as an array, answered and replayed', async () => {
    const query = 'mutation { createOrder(asArray: true) { id lines { sku totalCents } } }';
    const before = await count();
    const first = await post('adv75c-mw-map-getter-c', query);
    expect(first.body).toEqual({ data: { createOrder: { id: expect.any(Number), lines } } });
    const again = await post('adv75c-mw-map-getter-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('control: the Map without @Idempotent(): answered', async () => {
    const first = await post(
      'adv75c-mw-map-getter-u',
      'mutation { createOrderUnkeyed { id lines { sku totalCents } } }',
    );
    expect(first.body).toEqual({
      data: { createOrderUnkeyed: { id: expect.any(Number), lines } },
    });
  });

  it('the lines a Map: answered, and replayed as the first answer', async () => {
    const query = 'mutation { createOrder { id lines { sku totalCents } } }';
    const before = await count();
    const first = await post('adv75c-mw-map-getter-a', query);
    expect(first.body).toEqual({ data: { createOrder: { id: expect.any(Number), lines } } });
    const again = await post('adv75c-mw-map-getter-a', query);
    // Fails: { createOrder: null } with "Cannot return null for non-nullable field
    // OrderLine.totalCents." (the stored lines have lost their getter).
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });
});
