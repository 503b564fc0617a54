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
 * Fixed (session of 2026-12-07, fourth): `ontoNodeAgain` compares with what the node answers, own
 * or through its getters' prototype, and a "not stored" never replaces a stored read (read-
 * places.ts `laterHeld`): a stored read where the node held "not stored" becomes the node's, each
 * earlier place keeping its "not stored" as its own read.
 *
 * Adversary 111 (graphql, today's `ontoNodeAgain`): a retry that selects a getter field of one
 * object at one more place than its first call did loses the field's STORED value at the
 * place the first call selected it, and answers `field_not_stored` there. The line is one
 * object at `primary` and `lines[0]` (an ORM's relation and collection); the first call
 * selects its getter field `label` at one of them. The retry (the docs' "a retry that selects
 * a field the first call did not": that field errors, "the other fields answer their stored
 * values") selects it at both. The replay builds each place's object, and for the place that
 * did not store it a getter that throws `field_not_stored` as an OWN property; the stored
 * place gives `label` through a getter on a prototype (`throughGetters`). `ontoNodeAgain`
 * compares own descriptors with own descriptors only: (a) first `primary`, then `lines[0]`:
 * the node's `label` is on its prototype, so the not-stored own getter counts as one the node
 * lacks (`'add'`) and is defined on the node, shadowing the stored one: `primary.label`
 * answers null + `field_not_stored`; (b) first `lines`, then `primary`: `primary` adopts the
 * node first with its own not-stored getter, and `lines[0]`'s stored getter is put on the
 * prototype under it: `lines[0].label` answers null + `field_not_stored`, while `lines[1]`
 * and `lines[2]` (other objects) answer theirs. The first answer had the value there.
 *
 * User code: `Line { @Field(() => Int) id; @Field(() => String, { nullable: true }) get
 * label() }`, `sku` and the `order` back-reference no fields, a `@ResolveField() position`
 * the client does not select; `Order { id; primary: Line; lines: [Line] }`, `primary` being
 * `lines[0]`; `@Mutation() @Idempotent() placeOrder()`; Apollo, code-first. First call
 * `{ id primary { id label } lines { id } }`, retry `{ id primary { id label } lines { id
 * label } }` (and the mirror).
 *
 * Code path: lib/graphql/wire-value.ts `fromWire` (format 3: an own getter throwing
 * `notStoredField` for a selected field the place did not store; `throughGetters` for a stored
 * one) -> end: `ADOPTED` -> `ontoNodeAgain(built, node, place)`: own keys of `built` against
 * `Reflect.getOwnPropertyDescriptor(node, key)` (own only: the node's prototype getter is not
 * seen, `'add'` defines the not-stored getter over it); prototype getters against the node's
 * prototype only, under the node's own not-stored getter (case b).
 *
 * Docs quote (docs/guides/graphql.md, "A retry that selects other fields"): "A retry that
 * selects a field the first call did not gets, for that field, an error, never a made-up null
 * ... the other fields answer their stored values"; "one object answered at two places (an
 * order's `primary` line, also `lines[0]`) is one object at both, with each place's fields (a
 * getter field selected at one place only is answered there)".
 *
 * Severity: high (a stored field of a replay answered null with an error: the retry's answer
 * differs from the first answer on a field the first call selected).
 *
 * Fails now (un-skipped): (a) first `primary.label` `"line 1 (s1)"`; the retry `primary:
 * {"id":1,"label":null}` with `field_not_stored` at `placeOrder.primary.label` (beside the
 * three rightful ones at `lines.N.label`); (b) first `lines[0].label` `"line 1 (s1)"`; the
 * retry `lines[0].label` null with `field_not_stored` at `placeOrder.lines.0.label`,
 * `lines[1]`/`lines[2]` answered.
 *
 * Controls: the same retry as the first call (`lines { id label }` both times) replays the
 * same bytes (passes).
 * adversary111-graphql-getter-fails-at-one-place shares the root. The same app under Nest’s
 * global `fieldMiddleware` (outputs stored per place, middleware-outputs.ts) answers both retries
 * right (tried on main 0e95ac0e): the break is on the property-field road only.
 *
 * Suggested fix: in `ontoNodeAgain`, tell a field by where the node answers it, own OR
 * through its getter prototype (`key in node` / the prototype chain up to the class), and
 * never let a not-stored getter (a place that did not store it) replace or shadow a stored
 * value: note it as that place's placed read instead (`notePlacedRead(node, place, key,
 * throwing)`), as a value the node answers otherwise; likewise when the FIRST adoption brought
 * the not-stored getter, a later place's stored getter should replace it at the node and the
 * first place keep its error as a placed read.
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  sku!: string;

  order!: Order;

  @Field(() => String, { nullable: true })
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

describe('adversary 111: a retry selects a getter field of one object at one more place', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv111_gql_retry_getter_place', {
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

  const firstThenRetry = async (key: string, first: string, retry: string) => {
    const answered = await post(key, `mutation { placeOrder ${first} }`);
    const again = await post(key, `mutation { placeOrder ${retry} }`);
    // eslint-disable-next-line no-console
    console.log(key, answered.text, again.text);
    return { answered, again };
  };

  it('control: a retry that selects the label at the lines too answers the stored labels, not stored elsewhere', async () => {
    const { answered, again } = await firstThenRetry(
      'adv111-retry-getter-control',
      '{ id lines { id label } }',
      '{ id lines { id label } }',
    );
    expect(answered.body.errors).toBeUndefined();
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(answered.body.data));
  });

  it('a retry that adds lines { label } still answers primary.label as stored', async () => {
    const { answered, again } = await firstThenRetry(
      'adv111-retry-getter-primary-first',
      '{ id primary { id label } lines { id } }',
      '{ id primary { id label } lines { id label } }',
    );
    expect(answered.body.errors).toBeUndefined();
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    // primary.label was selected and stored: its stored value; lines[*].label were not.
    const paths = (again.body.errors ?? []).map((error: { path: unknown[] }) =>
      error.path.join('.'),
    );
    expect(paths).toEqual([
      'placeOrder.lines.0.label',
      'placeOrder.lines.1.label',
      'placeOrder.lines.2.label',
    ]);
    expect(again.body.data?.placeOrder?.primary).toEqual(answered.body.data.placeOrder.primary);
  });

  it('a retry that adds primary { label } still answers lines[0].label as stored', async () => {
    const { answered, again } = await firstThenRetry(
      'adv111-retry-getter-lines-first',
      '{ id primary { id } lines { id label } }',
      '{ id primary { id label } lines { id label } }',
    );
    expect(answered.body.errors).toBeUndefined();
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['placeOrder']);
    const paths = (again.body.errors ?? []).map((error: { path: unknown[] }) =>
      error.path.join('.'),
    );
    expect(paths).toEqual(['placeOrder.primary.label']);
    expect(again.body.data?.placeOrder?.lines).toEqual(answered.body.data.placeOrder.lines);
  });
});
