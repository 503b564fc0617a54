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
import { Exclude } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 107 (graphql): round 106 wrote the parents' own data (`__parent`) into ONE shared
 * graph, but an object whose class class-transformer serializes (any `@Exclude()`/`@Expose()`
 * on the entity, as the app's REST side uses with `ClassSerializerInterceptor`) keeps ALL its
 * data beside the fields under `__kept` (parent-keeping.ts: `byClass` -> `'kept'`), and
 * `__kept` is still written one typed graph per object (wire-value.ts `writeKept` ->
 * kept-data.ts `keepData`). An ORM's back-reference (`line.order === order`, with all its
 * lines) is then written again for every line: the stored answer grows with the square of the
 * lines (80/40 lines: x3.9), and `__kept` is never left out for `maxResponseBytes`
 * (parentDataWithin trims `__parent` only): at 200 lines (6 kB of data) the mutation's work is
 * rolled back and every attempt answers "larger than this mutation's maxResponseBytes": the
 * request can never succeed. Without the back-reference the same 200 lines are stored in
 * linear size and replay.
 *
 * User code: `@ObjectType() class Line { @Field(() => Int) id; @Exclude() costPrice }`
 * (class-transformer), `@ObjectType() Order { id; lines: [Line] }`; `@ResolveField(() => Int)
 * subtotal(@Parent() l) { return l.qty * l.unitPrice }`; `@Mutation(() => Order) @Idempotent()
 * importOrder(n)` returning the order whose `Line` instances point back at it (`line.order =
 * order`, as an ORM loads both sides); Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts object walk (`byClass` true: `besideFieldsMember` ->
 * 'kept') -> `writeKept(wire, kept)` -> kept-data.ts `keepData` -> typed-graph.ts `writeGraph`
 * (a graph per object); run-field.ts: `parentDataWithin(..., PARENT_MEMBERS, ...)` does not
 * touch `__kept` -> `IdempotencyResponseTooLargeError`, work rolled back.
 *
 * Docs quote (docs/guides/graphql.md): "The data all the objects of one answer keep there is
 * stored once, as one graph beside the answer: an object several of them reach (an ORM's
 * back-reference, each `line.order` the one order with all its lines) is written once, not
 * once per object, so the stored answer grows with the data, not with its square"; "under a
 * class class-transformer serializes, all of it stays under `__kept`".
 *
 * Severity: high (quadratic size and write on the event loop, from 6 kB of ordinary data; the
 * mutation is refused on every attempt: no effects twice, but a request that can never
 * succeed, a permanent error for data 150 times under the limit).
 *
 * Fails now (un-skipped): stored size ratio 80/40 lines 3.92; at 200 lines the first answer is
 * "The field's answer is larger than this mutation's maxResponseBytes (1048576 bytes): it
 * cannot be stored for replays, so nothing of the mutation was committed."
 *
 * Controls: the same class-transformer lines without the back-reference: linear (ratio < 2.5)
 * and 200 lines replay the same answer.
 *
 * Suggested fix: write every object's `__kept` of one answer into the same shared graph as
 * `__parent` (or a second shared graph), each `__kept` a `{ p }` reference, so that an object
 * several of them reach is written once; and weigh `__kept` like `__parent` in the size limit's
 * message at least (it cannot be left out: a serializer reads it as the answer).
 *
 * Fixed (session of 2026-12-07): each object's `__kept` is written into the answer's one shared
 * graph with the parents' data (wire-value.ts `writeKept` notes it, `writeParents` writes all),
 * `__kept` a `{ p }` node of it and its classes named per node (node-classes.ts; a class a
 * replay cannot tell there still answers an error, `k`); `parentDataWithin` never frees what a
 * `__kept` reaches and names its node anew (`pinned`).
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  /** Never serialized by the app's ClassSerializerInterceptor (REST side of the same entity). */
  @Exclude()
  costPrice?: number;
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
      const line = Object.assign(new Line(), {
        id: i,
        qty: 2,
        unitPrice: i,
        costPrice: 1,
      }) as LineRow;
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

describe('adversary 107: a back-reference kept again by every class-transformer object', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv107_gql_ct_back_reference', {
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
    const key = `adv107-ct-backref-${n}-${String(backRef)}`;
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
    const key = `adv107-ct-backref-replay-${n}-${String(backRef)}`;
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
