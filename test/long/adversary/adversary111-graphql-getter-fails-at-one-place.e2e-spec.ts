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
 * Fixed (session of 2026-12-07, fourth): `ontoNodeAgain` compares a later place's member with what
 * the node answers, its own or its getters' prototype's (read-places.ts `laterHeld`); a failed read
 * at a later place is that place's own read, never defined over the first place's.
 *
 * Adversary 111 (graphql, today's `ontoNodeAgain`): one entity at two places (an order's
 * `primary` line, also `lines[0]`) whose getter field fails at ONE of its reads (a signed
 * URL whose signing service failed once: the docs' own example of a read that fails) replays
 * the failure at BOTH places. GraphQL reads the getter at each place; the first answer (right,
 * as without the library) has the error at one place and a signed link at the other. The
 * replay stores a failed read as an OWN property of that place's object (`failedField`), a
 * read one through a getter on a prototype (`throughGetters`); `ontoNodeAgain` compares the
 * later place's own keys with the node's own keys only, and its getter prototype with the
 * node's only: (a) failed at `primary` (adopted first, its own failing property on the node),
 * read at `lines[0]`: the read's getter goes on the node's prototype, under the own failing
 * property, so `lines[0].url` throws too; (b) read at `primary` (its getter on the node's
 * prototype), failed at `lines[0]`: the failing own property is "one the node lacks"
 * (`'add'`) and is defined on the node, so `primary.url` throws too. The retry's answer has
 * an error and a null where the first answer had a link; no retry ever gets that link back.
 *
 * User code: `Line { @Field(() => Int) id; @Field(() => String, { nullable: true }) get url()
 * }` (a signed link; the signer fails one read: here the first, or the second, of each line),
 * `sku` and the `order` back-reference no fields, a `@ResolveField() position` not selected;
 * `Order { id; primary: Line; lines: [Line] }`, `primary` being `lines[0]`; `@Mutation()
 * @Idempotent() placeOrder()`; Apollo, code-first. The client selects `{ id primary { id url }
 * lines { id url } }`.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (a FailedRead at one place, a value at the
 * other: `givenAgain` notes the placed read, first answer right) -> replay `fromWire`: stored
 * `FAILED` -> `Object.defineProperty(value, name, failedField(...))` (own), a read ->
 * `throughGetters` (prototype) -> `ontoNode` at the first place, `ontoNodeAgain` at the second
 * (`Reflect.getOwnPropertyDescriptor(node, key)` only; the prototype loop under the node's
 * own keys).
 *
 * Docs quote (docs/guides/graphql.md): "One whose reading fails (a Promise that rejects, as a
 * signed URL's when the signing service is down; a getter that throws) is what GraphQL makes
 * of it, null with its error at its path ... a replay throws it again there"; "A getter
 * GraphQL reads at each place of one such object ... is read once per place, and each place
 * answers its own read, at the first call and on a replay alike".
 *
 * Severity: high (a replay differs from the first answer: a link lost, an error added).
 *
 * Fails now (un-skipped): (a) first `primary.url` null + error, `lines[0].url`
 * `https://cdn.example/lines/1?sig=2`; the replay `lines[0].url` null with a second
 * `signing service unavailable (line 1)` at `placeOrder.lines.0.url`; (b) first
 * `primary.url` `...lines/1?sig=1`, `lines[0].url` null + error; the replay `primary.url`
 * null with an added error at `placeOrder.primary.url`.
 *
 * Controls: the lines at one place each (`lines { id url }`), every read failing: the replay
 * answers the same data and errors (passes). Same root as
 * adversary111-graphql-retry-getter-one-more-place (own against prototype members in
 * `ontoNodeAgain`), here with the first call's own selection: no retry changes anything.
 * The same app under Nest's global `fieldMiddleware` (outputs stored per place,
 * middleware-outputs.ts) replays both cases right (tried on main 0e95ac0e).
 *
 * Suggested fix: in `ontoNodeAgain`, compare what the node ANSWERS for a key (own, or through
 * the getter prototype it was given) with what the later place's object answers, whatever the
 * holder; where they differ, note the later place's as a placed read (`notePlacedRead`) and
 * leave the node's as the first place made it, never defining the later place's on the node
 * nor putting its getters under an own property of the first place's.
 */
let pool: Pool;
/** Which read of a line the signing service fails: its first, or its second. */
let failing: 1 | 2 = 1;
const reads = new WeakMap<object, number>();

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  sku!: string;

  order!: Order;

  @Field(() => String, { nullable: true })
  get url(): string {
    const read = (reads.get(this) ?? 0) + 1;
    reads.set(this, read);
    if (read === failing) throw new Error(`signing service unavailable (line ${this.id})`);
    return `https://cdn.example/lines/${this.id}?sig=${read}`;
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

describe('adversary 111: a getter of one entity that fails at one of its two places', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv111_gql_getter_fails_once', {
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

  const errorPaths = (body: { errors?: { path: unknown[]; message: string }[] }) =>
    (body.errors ?? []).map((error) => `${error.path.join('.')}: ${error.message}`);

  it('control: a getter that fails at its one place replays its error there', async () => {
    failing = 1;
    const { first, again } = await twice('adv111-fails-control', '{ id lines { id url } }');
    expect(errorPaths(first.body)).toHaveLength(3);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
    expect(errorPaths(again.body)).toEqual(errorPaths(first.body));
  });

  it('failed at primary, read at lines[0]: the replay answers each place as the first answer', async () => {
    failing = 1;
    const { first, again } = await twice(
      'adv111-fails-primary',
      '{ id primary { id url } lines { id url } }',
    );
    expect(first.body.data.placeOrder.primary.url).toBeNull();
    expect(first.body.data.placeOrder.lines[0].url).toBe('https://cdn.example/lines/1?sig=2');
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
    expect(errorPaths(again.body)).toEqual(errorPaths(first.body));
  });

  it('read at primary, failed at lines[0]: the replay answers each place as the first answer', async () => {
    failing = 2;
    const { first, again } = await twice(
      'adv111-fails-lines',
      '{ id primary { id url } lines { id url } }',
    );
    expect(first.body.data.placeOrder.primary.url).toBe('https://cdn.example/lines/1?sig=1');
    expect(first.body.data.placeOrder.lines[0].url).toBeNull();
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
    expect(errorPaths(again.body)).toEqual(errorPaths(first.body));
  });
});
