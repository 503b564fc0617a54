import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
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
 * Fixed (session of 2026-12-07): lib/graphql/typed-graph.ts `writeGraph`'s `cell()` calls an
 * object's `toJSON()` once at each place, as JSON does (`SerializeJSONProperty`), and writes
 * what it gives as it is, never calling the result's `toJSON()` (a spread copy's own `toJSON`
 * is a function member, left out as JSON leaves it out); the cycle guard (`isJsonCycle`) no
 * longer counts one object's calls (1,001 rows sharing a spread price were a "cycle") but
 * asks whether the place is inside an object that the same `toJSON()` gave. `keepsExactly` and `sameData`'s fallback write through the
 * same `cell()`. Specs: lib/graphql/typed-graph.spec.ts ("a toJSON(), called once at each
 * place as JSON calls it").
 *
 * Adversary 105 (graphql): an object literal with a `toJSON()` that spreads itself (`toJSON()
 * { return { ...this, display: '€5' } }`, a common way to add a computed member to the JSON)
 * kept in a mutation value's own data (not a field) makes the typed graph's write loop for
 * ever: the spread copies the own `toJSON` method into the result, the library calls `toJSON()`
 * again on that result (JSON calls it once per place), which gives another new object with a
 * `toJSON`, and so on. Each result is a new object, so the guard (`isJsonCycle`, 1,000 calls of
 * ONE object's `toJSON()`) never trips: the event loop is blocked and memory grows (every
 * result is held in `jsonCalls`) until the process dies; the key is never answered. Here the
 * `toJSON()` counts its calls and gives a string after 20,000 of them, only so that the test
 * ends: JSON.stringify calls it once, the library 20,001 times.
 *
 * User code: `const price = { amount: 5, currency: 'EUR', toJSON() { return { ...this,
 * display: `€${this.amount}` } } }`; `@ObjectType() class Order { @Field(() => Int) id }`;
 * `@Mutation(() => Order) @Idempotent() order()` inserting a row and returning
 * `Object.assign(row, { price })`; `@ResolveField(() => Int) amount(@Parent() o) { return
 * o.price?.amount ?? 0 }`; Apollo.
 *
 * Code path: lib/graphql/wire-value.ts `writeParent` -> lib/graphql/kept-data.ts `keepData` ->
 * lib/graphql/typed-graph.ts `writeGraph` `cell()`: `while (hasOwnToJson(target)) { ... json =
 * target.toJSON(); ... if (isJsonCycle(jsonCalls, target)) throw ...; target = json }` -- the
 * count is per target, and each `toJSON()` result is a new target with a count of 1.
 *
 * Docs quote (docs/guides/graphql.md): "A member of the data kept beside the fields that has no
 * typed JSON form (a cycle through a `toJSON()`: one giving a new object that holds it again,
 * 1,000 times over ...) is left out alone, and said so; the answer is stored, never failed by
 * it"; "a `toJSON()` that is written instead, as for a `Decimal`" (as JSON writes it).
 *
 * Severity: high (a hang: the process's event loop is blocked for ever inside the mutation,
 * its memory grows until it dies; the key stays held until its lease lapses, and every retry
 * hangs the same way).
 *
 * Fails now (un-skipped): `toJSON()` is called 20,001 times in one mutation (the guard's
 * string written), where JSON.stringify calls it once; the replay then answers `amount: 0`
 * (the guard's string kept) where the first answered 5.
 *
 * Controls: JSON.stringify of the value calls `toJSON()` once; the same value without a
 * spread `toJSON` (a class whose `toJSON()` is on its prototype, not copied by the spread)
 * is kept and answered as JSON writes it.
 *
 * Suggested fix: call `toJSON()` once per place as JSON does (`SerializeJSONProperty` never
 * calls the result's `toJSON()`): write the result's own members as they are; or count the
 * calls along one chain (reset per `cell()`), not per target.
 */
let pool: Pool;
let calls = 0;
const GUARD = 20_000;

function spreadPrice(): Record<string, unknown> {
  return {
    amount: 5,
    currency: 'EUR',
    toJSON(this: Record<string, unknown>): unknown {
      calls += 1;
      // Only so that the test ends: without it, the library's write never does.
      if (calls > GUARD) return 'guard';
      return { ...this, display: `€${String(this.amount)}` };
    },
  };
}

class ClassPrice {
  constructor(
    readonly amount: number,
    readonly currency: string,
  ) {}

  toJSON(): unknown {
    calls += 1;
    return { ...this, display: `€${String(this.amount)}` };
  }
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;
}

type OrderRow = Order & { price?: { amount?: number } };

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async order(): Promise<OrderRow> {
    return Object.assign(await this.insert(), { price: spreadPrice() });
  }

  @Mutation(() => Order)
  @Idempotent()
  async orderClass(): Promise<OrderRow> {
    return Object.assign(await this.insert(), { price: new ClassPrice(5, 'EUR') });
  }

  @ResolveField(() => Int)
  amount(@Parent() order: OrderRow): number {
    return order.price?.amount ?? 0;
  }

  private async insert(): Promise<Order> {
    const { rows } = await pool.query<Order>('INSERT INTO orders DEFAULT VALUES RETURNING id');
    return rows[0];
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

describe('adversary 105: a toJSON() that spreads itself is called without end', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv105_gql_tojson_spread', {
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
      .timeout(30_000)
      .send(JSON.stringify({ query }));

  it('control: JSON.stringify calls the spread toJSON() once', () => {
    calls = 0;
    expect(JSON.stringify({ price: spreadPrice() })).toBe(
      '{"price":{"amount":5,"currency":"EUR","display":"€5"}}',
    );
    expect(calls).toBe(1);
  });

  it('control: a class toJSON() (on its prototype) is called once per place and replays', async () => {
    calls = 0;
    const query = 'mutation { orderClass { id amount } }';
    const first = await post('adv105-tojson-class', query);
    const again = await post('adv105-tojson-class', query);
    expect(first.body.data.orderClass.amount).toBe(5);
    expect(again.body.data).toEqual(first.body.data);
    expect(calls).toBeLessThanOrEqual(2);
  });

  it('the spread toJSON() is called as JSON calls it, not without end', async () => {
    calls = 0;
    const query = 'mutation { order { id amount } }';
    const first = await post('adv105-tojson-spread', query);
    const during = calls;
    const again = await post('adv105-tojson-spread', query);
    // eslint-disable-next-line no-console
    console.log('SPREAD', during, first.text, again.text);
    expect(first.body.data.order.amount).toBe(5);
    expect(during).toBeLessThanOrEqual(2);
    expect(again.body.data).toEqual(first.body.data);
  });
});
