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
 * Fixed (session of 2026-12-07, fourth): a replay's node adopted again at a later place
 * keeps what the earlier place made of it and gains what it lacks (wire-value.ts
 * `ontoNodeAgain`: the getters of a getter field selected at one place only stay), never
 * taking the later place's prototype over the earlier's; the first call's one Proxy per
 * object gives `primary.position` 1, as without the library.
 *
 * Adversary 110 (graphql): one entity answered at two places (an order's `primary` line, also
 * `lines[0]`), whose type has a getter field (`@Field() get label()`) that the client selects
 * at `primary` only, replays `data: null`: the replay makes ONE object of the line for both
 * places (its node of the shared graph, adopted at each place), whose prototype ends as the
 * last place's (`lines[0]`'s, with no `label` getter: not selected there), so
 * `primary.label` (a `String!`) resolves to null and
 * GraphQL nulls the whole non-null chain up to `data`. The mutation committed; every retry
 * answers `Cannot return null for non-nullable field Line.label.` Without the replay's one
 * object (the line at `primary` only) the same getter replays fine. The first answer also
 * differs from the app's without the library: `primary.position` is 0 (the Proxy at
 * `primary` is not the line `order.lines` holds), where it is 1 without the library.
 *
 * User code: `Line { id; @Field() get label() }` (a getter field: an entity's computed
 * display), `sku` and the `order` back-reference no fields; `Order { id; primary: Line;
 * lines: [Line] }`, `primary` being `lines[0]` (as an ORM loads a relation and its
 * collection); `@ResolveField() position(@Parent() line) { return
 * line.order.lines.indexOf(line) + 1 }`, `isPrimary(@Parent() line) { return
 * line.order.primary === line }`; `@Mutation() @Idempotent() placeOrder()`; Apollo,
 * code-first. The client selects `primary { id label position isPrimary } lines { id
 * position isPrimary }`.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (the getter's value stored at `primary`'s
 * wire: `ACCESSORS`/`replaced`) -> `writeParents` (each place's `__parent` naming the line's
 * one node `s`) -> replay `fromWire` end: `throughGetters` gives `primary`'s built object
 * `label` through a getter (its prototype), then `ontoNode(value, node)` (parent-identity.ts)
 * adopts the node for EACH place (`adoptsNode`: taken already), each call
 * `Object.setPrototypeOf(node, <that place's built prototype>)`: `lines[0]`'s (no `label`)
 * replaces `primary`'s -> GraphQL's default resolver reads `label` undefined -> non-null
 * error up to `data`.
 *
 * Docs quote (docs/guides/graphql.md): "one object answered at two places (an order's
 * `primary` line, also `lines[0]`) is one object at both"; "a replay gives a getter's field
 * through a getter"; "A replay's resolvers get the same values as the first call's, and the
 * answer is the same bytes"; "data kept beside the fields (`__parent`, `__kept`, below) never
 * replaces a field's stored value on a replay".
 *
 * Severity: high (a committed mutation's every retry answers `data: null` and an error; the
 * first answer is wrong too).
 *
 * Fails now (un-skipped): without the library `primary { id: 1, label: "line 1 (s1)",
 * position: 1, isPrimary: true }`; the first answer `position: 0` there; the replay
 * `{"errors":[{"message":"Cannot return null for non-nullable field Line.label.","path":
 * ["placeOrder","primary","label"],...}],"data":null}`.
 *
 * On Mercurius (`MercuriusDriver`, Fastify) the same (seen by review with this app on it:
 * the same first answers and replays).
 *
 * Controls: the getter selected under `lines` only (and not at `primary`) answers as without
 * the library and replays the same bytes.
 *
 * Suggested fix: where a replay adopts one node for several places, give each place's
 * stored fields (its getters' values included) to the one object, as the first call's
 * object had them all (or adopt only where the places' stored fields agree); and make one
 * Proxy per source object per walk (see adversary110-graphql-getter-entity-two-places-two-
 * proxies) so the first answer is the app's.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  sku!: string;

  order!: Order;

  @Field()
  get label(): string {
    return `line ${this.id} (${this.sku})`;
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

  @ResolveField(() => Boolean)
  isPrimary(@Parent() line: Line): boolean {
    return line.order.primary === line;
  }
}

async function makeOrder(): Promise<Order> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const order = new Order();
  order.id = rows[0].id;
  order.lines = [1, 2, 3].map((id) => Object.assign(new Line(), { id, sku: `s${id}`, order }));
  order.primary = order.lines[0];
  return order;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  placeOrder(): Promise<Order> {
    return makeOrder();
  }

  @Mutation(() => Order)
  placeOrderPlain(): Promise<Order> {
    return makeOrder();
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

describe('adversary 110: a getter field selected at one place of an object at two places replays data null', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv110_gql_getter_one_place', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string | undefined, query: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) call.set('Idempotency-Key', key);
    return call.timeout(60_000).send(JSON.stringify({ query }));
  };

  /** The answer without the library, the first answer with it, and its replay. */
  const run = async (key: string, selection: string) => {
    const plain = await post(undefined, `mutation { placeOrderPlain ${selection} }`);
    const first = await post(key, `mutation { placeOrder ${selection} }`);
    const again = await post(key, `mutation { placeOrder ${selection} }`);
    // The order's id differs between the plain call and the idempotent one.
    const shape = (data: { id: number } | undefined) => data && JSON.stringify({ ...data, id: 0 });
    return {
      plain: shape(plain.body.data?.placeOrderPlain),
      first: shape(first.body.data?.placeOrder),
      again: shape(again.body.data?.placeOrder),
      firstBody: first.body as { errors?: unknown },
      againBody: again.body as {
        errors?: unknown;
        extensions?: { idempotency?: { replayed?: string[] } };
      },
    };
  };

  it('control: the getter selected under lines only answers as without the library, and replays the same bytes', async () => {
    const { plain, first, again, firstBody, againBody } = await run(
      'adv110-control',
      `{ id primary { id position isPrimary } lines { id label position isPrimary } }`,
    );
    expect(firstBody.errors).toBeUndefined();
    expect(againBody.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(first).toBe(plain);
    expect(again).toBe(first);
  });

  it('the getter selected at primary only replays the same bytes, as the app answers without the library', async () => {
    const { plain, first, again, firstBody, againBody } = await run(
      'adv110-getter-one-place',
      `{ id primary { id label position isPrimary } lines { id position isPrimary } }`,
    );
    // eslint-disable-next-line no-console
    console.log('GETTER AT ONE PLACE', { plain, first, again });
    expect(firstBody.errors).toBeUndefined();
    expect(againBody.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(againBody.errors).toBeUndefined();
    expect(again).toBe(first);
    expect(first).toBe(plain);
  });
});
