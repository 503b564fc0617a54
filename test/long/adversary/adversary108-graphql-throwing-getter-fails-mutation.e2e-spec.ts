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
 * Fixed (session of 2026-12-07, second): lib/graphql/wire-value.ts reads a parent's own
 * members beside its fields (and under symbols) through `readOwn`: a getter that throws is
 * left out alone and said in the log ("its own eta, whose getters threw when read, is not
 * kept"), the answer stored as without the library.
 *
 * Adversary 108 (graphql): a parent's own enumerable getter that is no field of its type (a
 * computed `eta` whose rates service is down) is read by the library when it notes the
 * parent's own data for the app's resolvers (`__parent`), outside any guard: its error fails
 * the whole store, and run-field.ts takes it for the resolver's own final error. The
 * mutation's work is rolled back and the getter's error is stored as the key's answer, replayed
 * for ever, where GraphQL never reads `eta` and the mutation, without the library, answers its
 * order. (Inside the shared graph, a throwing getter is left out alone; only the parent's
 * first level is read unguarded.)
 *
 * User code: round 107's `Order { id; lines: [Line] }`, `Line { id }` with
 * `@ResolveField() subtotal(@Parent() line)`; each line row carries
 * `Object.defineProperty(row, 'eta', { get() { throw new Error('rates service unavailable') },
 * enumerable: true })` (no field); the client selects `lines { id subtotal }`; Apollo.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (`for (const name of Object.keys(source))
 * ... defineOwn(..., source[name])`: the getter read, its throw uncaught) -> `outputWire`
 * rejects -> run-field.ts `catch (error) { return failed(...) }` ("No JSON form ...") ->
 * `classifyHandlerError` final -> rolled back, stored.
 *
 * Docs quote (docs/guides/graphql.md): "a field the operation does not select is neither read
 * (a getter is not called ...)", "A member of the data kept beside the fields that has no typed
 * JSON form ... is left out alone, and said so; the answer is stored, never failed by it", and
 * for its unselected fields' data "plain properties only: never a getter".
 *
 * Severity: high (effects not done and a wrong answer replayed for ever: the mutation that
 * succeeds without the library answers `rates service unavailable`, `data: null`, on every
 * retry; the app cannot retry it under its key).
 *
 * Fails now (un-skipped): first answer `{"errors":[{"message":"rates service unavailable",
 * "path":["importOrder"]...}],"data":null}`, no order inserted; the replay answers the same
 * error with the replay marker.
 *
 * Controls: the same rows without the getter run once and replay the same bytes.
 *
 * Suggested fix: read a parent's own non-field members by descriptor, as `ownValue` does for
 * its unselected fields (a getter: never called, not kept, said in the log), or call it inside
 * a try and leave it out alone where it throws, as the graph writer does.
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
  async importOrder(
    @Args('n', { type: () => Int }) n: number,
    @Args('eta', { type: () => Boolean }) eta: boolean,
  ): Promise<OrderRow> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const order = { id: rows[0].id, lines: [] } as unknown as OrderRow;
    for (let i = 1; i <= n; i += 1) {
      const row: LineRow = { id: i, qty: 2, unitPrice: i, order };
      // A computed property of the row, no field: the carrier's rates service is down.
      if (eta) {
        Object.defineProperty(row, 'eta', {
          get: () => {
            throw new Error('rates service unavailable');
          },
          enumerable: true,
        });
      }
      order.lines.push(row);
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

describe('adversary 108: a parent with an own getter that throws, no field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv108_gql_throwing_getter', {
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

  const count = async () =>
    (await fixture.admin.query<{ n: number }>('SELECT count(*)::int AS n FROM orders')).rows[0].n;

  const twice = async (key: string, eta: boolean) => {
    const query = `mutation { importOrder(n: 3, eta: ${eta}) { id lines { id subtotal } } }`;
    const before = await count();
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('THROWING GETTER', first.text, again.text);
    return { first, again, made: (await count()) - before };
  };

  it('control: rows without the getter run once and replay the same data', async () => {
    const { first, again, made } = await twice('adv108-getter-control', false);
    expect(first.body.errors).toBeUndefined();
    expect(made).toBe(1);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('rows with a throwing getter no field exposes answer as without the library', async () => {
    const { first, again, made } = await twice('adv108-getter', true);
    // GraphQL never reads `eta`: without the library the mutation answers its order.
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.lines).toHaveLength(3);
    expect(made).toBe(1);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
