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
 * Fixed (session of 2026-12-07, fourth): the first call's walk makes ONE Proxy per object
 * whatever its places (wire-value.ts `walkValue`: a later place's reads go into the first
 * Proxy's `given`, `givenAgain`), so `primary` and `lines[0]` are one object to the
 * resolvers; a field read otherwise at a later place is answered there by a wrapper on the
 * schema's property fields (placed-reads.ts, read-places.ts).
 *
 * Adversary 110 (graphql): one entity answered at two places of a mutation's answer (an
 * order's `primary` line, also `lines[0]`, as an ORM loads it), whose type has a getter field
 * (`@Field() get label()`) selected at both, is given to the app's resolvers as TWO different
 * Proxies at the first call: the walk makes a Proxy of the line per place (wire-value.ts
 * `over`, one per `walkValue` of it), and `walk.views` notes only the first one made
 * (`if (!walk.views.has(source))`). A read through the order's Proxy gives that first Proxy
 * at `order.primary` and the second ones in `order.lines` (the list read at its place). So
 * at the first call `line.order.lines.indexOf(line)` at `primary` is -1 and
 * `line.order.primary === line` at `lines[0]` is false; without the library (and on the
 * replay, which adopts one object for both places) they are 0 and true. The first answer
 * differs from the app's answer without the library, and the replay differs from the first
 * answer.
 *
 * User code: `Line { id; @Field() get label() }` (a getter field, as an entity's computed
 * display), `sku` and the `order` back-reference no fields; `Order { id; primary: Line;
 * lines: [Line] }`, `primary` being `lines[0]`; `@ResolveField() position(@Parent() line) {
 * return line.order.lines.indexOf(line) + 1 }`, `isPrimary(@Parent() line) { return
 * line.order.primary === line }`; `@Mutation() @Idempotent() placeOrder()`; Apollo,
 * code-first. The client selects `primary { id label position isPrimary } lines { id label
 * position isPrimary }`.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (a place per walk: `replaced.label` for the
 * getter, so `over(source, replaced, walk.views)` makes a new Proxy per place) -> `views.set`
 * only for the first -> first-answer-view.ts `seenThrough` gives that first Proxy for
 * `order.primary`, while `order.lines` is the list the walk read (`given`), holding the
 * second Proxy.
 *
 * Docs quote (docs/guides/graphql.md): "an object of the answer seen so, reached back through
 * its data, is read as that same Proxy: `line.order` is the order the answer holds, and
 * `line.order.lines.indexOf(line)` finds the line, at the first call as on a replay";
 * "one object answered at two places (an order's `primary` line, also `lines[0]`) is one
 * object at both"; "A replay's resolvers get the same values as the first call's, and the
 * answer is the same bytes".
 *
 * Severity: high (a wrong first answer, and a replay answering other bytes than the first).
 *
 * Fails now (un-skipped): without the library `primary { position: 1, isPrimary: true }`,
 * `lines[0] { position: 1, isPrimary: true }`; the first answer `primary { position: 0 }`,
 * `lines[0] { isPrimary: false }`; the replay `1` and `true` again.
 *
 * The same with a TypeORM-style lazy relation instead of the getter (`@Field(() => Customer)
 * customer: Promise<Customer>`, selected at `primary`, or at both places): the first answer's
 * `primary.position` is 0 and `lines[0]`'s `line.order.primary === line` false, the replay 1
 * and true (seen by review with a probe of the same app).
 *
 * On Mercurius (`MercuriusDriver`, Fastify) the same (seen by review with this app on it:
 * the same first answers and replays).
 *
 * Controls: the getter selected only under `lines` (`primary` unproxied: one Proxy of the
 * line) answers as without the library and replays the same bytes.
 *
 * Suggested fix: one Proxy per source object per walk: where `views` has the object already,
 * add the later place's `replaced` to that Proxy's `given` (the same getter read gives the
 * value read first) and return it, so every place and every read through the data hands the
 * resolvers one object, as without the library.
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

describe('adversary 110: one entity with a getter field at two places is two Proxies at the first call', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv110_gql_two_proxies', {
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

  it('one entity at two places is one object to the resolvers at the first call, as on the replay', async () => {
    const { plain, first, again, firstBody, againBody } = await run(
      'adv110-two-proxies',
      `{ id primary { id label position isPrimary } lines { id label position isPrimary } }`,
    );
    // eslint-disable-next-line no-console
    console.log('TWO PROXIES', { plain, first, again });
    expect(firstBody.errors).toBeUndefined();
    expect(againBody.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(first).toBe(plain);
    expect(again).toBe(first);
  });
});
