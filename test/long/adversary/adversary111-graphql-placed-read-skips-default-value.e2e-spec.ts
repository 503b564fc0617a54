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
 * Fixed (session of 2026-12-07, fourth): a placed read goes through the field's own resolver on the
 * one object, its property answering that place's read (placed-reads.ts `readingAt`): Nest's
 * resolver applies the `defaultValue` to an `undefined` read, on the replay as at the first call.
 *
 * Adversary 111 (graphql, today's placed reads): one entity at two places (an order's `primary`
 * line, also `lines[0]`) whose getter field has a `@Field({ defaultValue })` and gives a value
 * at one read, `undefined` at the other (a promotion that ended between the reads, a cache
 * entry evicted: the counter here stands for it) replays `null` where its first answer had the
 * default. Nest answers `defaultValue` where the property is `undefined` (its
 * `rootFieldResolver`), at the first call as without the library: `primary.promo`
 * `"PROMO-1-1"`, `lines[0].promo` `"no promotion"`. On the replay the node is adopted at
 * `primary` first; `lines[0]` holds another getter, so `ontoNodeAgain` notes it as that
 * place's placed read (`descriptorRead`), and the wrapper `answerPlacedReadsOf` puts on the
 * field answers `read()` itself, never going through Nest's resolver: `undefined` gives
 * `null`, not the default. The other direction (undefined first, then a value) holds.
 *
 * User code: `Line { @Field(() => Int) id; @Field(() => String, { nullable: true,
 * defaultValue: 'no promotion' }) get promo(): string | undefined }`, `sku` and the `order`
 * back-reference no fields, a `@ResolveField() position` not selected; `Order { id; primary:
 * Line; lines: [Line] }`, `primary` being `lines[0]`; `@Mutation() @Idempotent()
 * placeOrder()`; Apollo, code-first. The client selects `{ id primary { id promo } lines { id
 * promo } }`.
 *
 * Code path: lib/graphql/placed-reads.ts `answerPlacedReadsOf` (the wrapper: `if (read) return
 * read()`, the field's own resolver, Nest's `rootFieldResolver` with its `defaultValue`,
 * skipped) <- wire-value.ts `ontoNodeAgain` -> `notePlacedRead(node, place, key, () =>
 * descriptorRead(descriptor, node))` (the later place's getter, `undefined`). nest-fields.ts
 * knows the field's `fallback`; the placed read does not apply it.
 *
 * Docs quote (docs/guides/graphql.md): "Each field is read as Nest's code-first schema reads
 * it: by the class property its `@Field()` decorates ..., and its `@Field({ defaultValue })`
 * where that property is `undefined`"; "A getter GraphQL reads at each place of one such
 * object ... each place answers its own read, at the first call and on a replay alike".
 *
 * Severity: high (the replay differs from the first answer: null where it had the default).
 *
 * Fails now (un-skipped): first `lines[0].promo` `"no promotion"`, the replay `null`
 * (`primary.promo` `"PROMO-1-1"` both times).
 *
 * Controls: the lines at one place each, `undefined` at every first read: the default both
 * times (passes); undefined at `primary`, a value at `lines[0]`: the replay the same (passes).
 * The same app under Nest's global `fieldMiddleware` replays the default (tried on main
 * 0e95ac0e).
 *
 * Suggested fix: have the placed read go through the field's own resolver on the place's
 * value (call `own` with a source whose property gives `read()`), or apply the field's
 * `nestField(...).fallback` where `read()` gives `undefined`, on the replay as the first call
 * (`givenAgain` notes `asRead(item)` the same way: check it too).
 */
let pool: Pool;
/** Which read of a line finds no promotion: its first, or its second. */
let failing: 1 | 2 = 1;
const reads = new WeakMap<object, number>();

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  sku!: string;

  order!: Order;

  @Field(() => String, { nullable: true, defaultValue: 'no promotion' })
  get promo(): string | undefined {
    const read = (reads.get(this) ?? 0) + 1;
    reads.set(this, read);
    return read === failing ? undefined : `PROMO-${this.id}-${read}`;
  }
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
    }),
  ],
  providers: [OrdersResolver, LinesResolver],
})
class OrdersModule {}

describe('adversary 111: a defaultValue getter of one entity, undefined at one of its places', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv111_gql_probe_default', {
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
    console.log(key, first.text, again.text);
    return { first, again };
  };

  it('control: undefined at each one place answers the default, and the replay too', async () => {
    failing = 1;
    const { first, again } = await twice('adv111-default-control', '{ id lines { id promo } }');
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.placeOrder.lines[0].promo).toBe('no promotion');
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('control: undefined at primary, a value at lines[0]: the replay answers the same', async () => {
    failing = 1;
    const { first, again } = await twice(
      'adv111-default-primary',
      '{ id primary { id promo } lines { id promo } }',
    );
    expect(first.body.data.placeOrder.primary.promo).toBe('no promotion');
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a value at primary, undefined at lines[0]: the replay answers the default there', async () => {
    failing = 2;
    const { first, again } = await twice(
      'adv111-default-lines',
      '{ id primary { id promo } lines { id promo } }',
    );
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.placeOrder.primary.promo).toBe('PROMO-1-1');
    expect(first.body.data.placeOrder.lines[0].promo).toBe('no promotion');
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
