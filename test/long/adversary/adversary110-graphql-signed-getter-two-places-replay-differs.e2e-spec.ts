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
 * Fixed (session of 2026-12-07, fourth): each place's own read of a getter is answered at
 * that place, on the first call's one Proxy and on the replay's one node alike (placed-reads.ts:
 * a wrapper on each property field answers a place whose read differs from the object's, by
 * `info.path`; read-places.ts decides when a later read is one), so the replay answers
 * `?sig=4` at `primary` and `?sig=5` at `lines[0]`, as the first answer did.
 *
 * Adversary 110 (graphql): one entity answered at two places (an order's `primary` line, also
 * `lines[0]`, as an ORM loads a relation and its collection) whose type has a getter field
 * that gives a new value at each read (a signed URL: `@Field() get url()`, signed afresh per
 * read) replays other bytes than its first answer, with no resolver of the app selected at
 * all. GraphQL reads the getter at each place, so the first answer has two signatures (as
 * without the library: `primary.url` `...?sig=4`, `lines[0].url` `...?sig=5`); the library
 * stores each place's read (its Proxy per place answers it). The replay makes the line ONE
 * object for both places (the node its `__parent` names, adopted at each place), and each
 * adoption sets that object's prototype (whose getter gives the stored value) to its place's:
 * the last place's wins, so the replay answers `lines[0]`'s signature at `primary` too
 * (`...?sig=5` twice). The client's retry gets a different `primary.url` than its first
 * answer.
 *
 * User code: `Line { id; @Field() get url() }` (a signed link, each read signing afresh: a
 * counter stands for the signature's nonce), `sku` and the `order` back-reference no fields,
 * a `@ResolveField() position(@Parent() line)` the client does not select (its type having
 * one is what keeps the line's own data); `Order { id; primary: Line; lines: [Line] }`,
 * `primary` being `lines[0]`; `@Mutation() @Idempotent() placeOrder()`; Apollo, code-first.
 * The client selects `primary { id url } lines { id url }`.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (each place reads the getter once:
 * `replaced.url`, its wire `url`, `ACCESSORS`) -> `writeParents` (each place's `__parent`
 * naming the line's one node `s`) -> replay `fromWire` end: `throughGetters` gives each
 * place's built object its `url` through a getter on a prototype of its own, then
 * `ontoNode(value, node)` (parent-identity.ts) for EACH place (`adoptsNode`: taken
 * already): `Object.setPrototypeOf(node, <that place's prototype>)`, the last one kept.
 *
 * Docs quote (docs/guides/graphql.md): "a getter (a signed URL's) and a Promise are read
 * once, and the first answer is given what was read"; "a replay gives a getter's field
 * through a getter"; "A replay's resolvers get the same values as the first call's, and the
 * answer is the same bytes".
 *
 * Severity: high (a replay answers other bytes than the first answer: another signed link).
 *
 * Fails now (un-skipped): first `primary.url` `https://cdn.example/lines/1?sig=4`,
 * `lines[0].url` `...?sig=5`; the replay `...?sig=5` at both places.
 *
 * Controls: each line at one place only (`lines { id url }`, no `primary`) replays the same
 * bytes. Same root as adversary110-graphql-getter-one-place-replays-null (the last
 * adoption's prototype kept), another symptom: no error, a different link.
 *
 * Suggested fix: where one node is adopted at several places, keep each place's stored
 * getter values per place (a replay's object per place over the one node, or the node's
 * getters answering by place), or adopt only where the places' stored getter values agree;
 * never let a later place's prototype replace an earlier one's.
 */
let pool: Pool;
let signed = 0;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  sku!: string;

  order!: Order;

  @Field()
  get url(): string {
    signed += 1;
    return `https://cdn.example/lines/${this.id}?sig=${signed}`;
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

describe('adversary 110: a signed getter of one entity at two places replays another link', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv110_gql_signed_places', {
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
    console.log('SIGNED', first.text, again.text);
    return { first, again };
  };

  it('control: each line at one place replays the same links', async () => {
    const { first, again } = await twice('adv110-signed-control', '{ id lines { id url } }');
    expect(first.body.errors).toBeUndefined();
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('the line at primary and lines[0] replays the links of its first answer', async () => {
    const { first, again } = await twice(
      'adv110-signed-places',
      '{ id primary { id url } lines { id url } }',
    );
    expect(first.body.errors).toBeUndefined();
    // As without the library: GraphQL reads the getter at each place.
    expect(first.body.data.placeOrder.primary.url).not.toBe(
      first.body.data.placeOrder.lines[0].url,
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
