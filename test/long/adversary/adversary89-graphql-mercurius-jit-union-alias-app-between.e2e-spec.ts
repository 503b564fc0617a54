import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import {
  Args,
  createUnionType,
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 89 (graphql): Mercurius with `jit: 1`, a mutation that answers a union
 * (`Placed = Quote | Order`), and an operation whose two inline fragments give one response
 * key from two different fields, as GraphQL allows for different member types:
 * `... on Quote { items: quoteLines { id label } } ... on Order { items: lines { id label } }`.
 * `Order.lines` is a `@ResolveField()` (read anew on every call); `Line.label` is behind Nest
 * field middleware. The first call (graphql-js, uncompiled) answers; a retry of the same
 * document (now compiled by graphql-jit) answers `data: null` with a `field_not_stored` error
 * at `place.items.1.label`, a field the retry did select exactly as the first call did.
 *
 * User code: `createUnionType({ name: 'Placed', types: () => [Quote, Order] })`;
 * `@Mutation(() => Placed) @Idempotent() place()`; `@ResolveField(() => [Line]) lines()` on
 * Order; `@Field({ middleware: [shout] }) label` on Line; `Quote.quoteLines` plain data;
 * `GraphQLModule.forRoot({ driver: MercuriusDriver, jit: 1 })` on Fastify.
 *
 * Code path: lib/graphql/middleware-outputs.ts `appResolvedBetween` -> lib/graphql/named-path.ts
 * `namedSteps`: graphql-jit tells no `typename`, so at the union step each possible type is
 * tried in the schema's order (Quote first: `items` is `quoteLines`, told `property`), then
 * Order names `items` as another field (`lines`): `found.step !== step` returns undefined
 * before `onField` is told of `Order.lines`, so no app-resolved field is found between the
 * mutation and `label`; `replayedOutputAt` then answers `label` from the stored outputs, which
 * hold no such item (the list was read anew): `notStoredField`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A middleware field under such a
 * resolver's value (a `@ResolveField()` list of lines, each `label` behind middleware) is that
 * value's, read anew on a replay: its middleware runs, as on a query (under Mercurius' `jit`
 * too, whose compiled run tells no field's type: the fields between are found by their names
 * in the operation and the schema)"; and a retry that selects what the first call selected is
 * never refused `field_not_stored`.
 *
 * Severity: high: the replay of a committed order answers `data: null` (the non-null `label`
 * error nulls up to the root) with a misleading `field_not_stored`, where the first answer
 * gave the order; every compiled retry of that document does so.
 *
 * Fails now (unskip the it.skip and run this file): `data: null`, errors
 * `[{ extensions: { code: 'field_not_stored' }, path: ['place', 'items', '1', 'label'] }]`.
 * Control (passes): the same retry as a document of its own name (its first run, uncompiled:
 * graphql-js tells each step's typename). Verified: the union declared `[Order, Quote]` (Order's
 * `lines` tried first) passes the failing case too, so the order of the members decides.
 *
 * Suggested fix: in `namedSteps`, where no `typename` is told under an abstract type, do not
 * give up when members name the response key as different fields: follow each member's own
 * field (a set of candidate paths), and let `appResolvedBetween` count an app field on any of
 * them; or tell the member from the parent value GraphQL resolved (`__replayedMember` / the
 * first answer's members) rather than from the schema.
 *
 * Fixed (session of 2026-12-06, third): lib/graphql/named-path.ts `namedSteps` reads a union
 * step without a `typename` by the member the replay answered the parent as
 * (lib/graphql/answered-members.ts, noted by the `resolveType()` wrapper in
 * lib/graphql/replayed-member.ts): the Order's `lines`, the app's, so the label's middleware
 * runs on the fresh lines; where the member is not known, members that give one response key as
 * different fields no longer stop `onField` before each is told (no named step then).
 */
let pool: Pool;

/** Nest's field middleware: the label in capitals. */
const shout: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string | null;
  return value === null ? null : value.toUpperCase();
};

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  @Field({ middleware: [shout] })
  label!: string;
}

@ObjectType()
class Quote {
  @Field(() => Int)
  id!: number;

  /** A quote's lines: plain data it holds. */
  @Field(() => [Line])
  quoteLines!: Line[];
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;
}

/** What placing gives: an order, or a quote where the cart needs approval. */
const Placed = createUnionType({
  name: 'Placed',
  types: () => [Quote, Order] as const,
  resolveType: (value: { kind?: string }) => (value.kind === 'quote' ? Quote : Order),
});

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Placed)
  @Idempotent()
  async place(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    await pool.query("INSERT INTO order_lines (order_id, label) VALUES ($1, 'first')", [
      rows[0].id,
    ]);
    return Object.assign(new Order(), { id: rows[0].id, kind: 'order' });
  }

  /** Not idempotent: a line added to the order later. */
  @Mutation(() => Boolean)
  async addLine(
    @Args('orderId', { type: () => Int }) orderId: number,
    @Args('label') label: string,
  ): Promise<boolean> {
    await pool.query('INSERT INTO order_lines (order_id, label) VALUES ($1, $2)', [orderId, label]);
    return true;
  }

  /** The order's lines, newest first: read anew on every call. */
  @ResolveField(() => [Line])
  async lines(@Parent() order: Order): Promise<Line[]> {
    const { rows } = await pool.query<Line>(
      'SELECT id, label FROM order_lines WHERE order_id = $1 ORDER BY id DESC',
      [order.id],
    );
    return rows;
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      autoSchemaFile: true,
      graphiql: false,
      jit: 1,
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 89: Mercurius jit, a union whose members give one response key from two fields', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv89_gql_jit_union_alias', {
      module: OrdersModule,
      max: 6,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
        await admin.query(
          'CREATE TABLE order_lines (id serial PRIMARY KEY, order_id int NOT NULL, label text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string | undefined, query: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(20_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send(JSON.stringify({ query }));
  };

  const operation = (name: string) =>
    `mutation ${name} { place { ... on Quote { id items: quoteLines { id label } } ` +
    `... on Order { id items: lines { id label } } } }`;

  const run = async (key: string, first: string, retry: string) => {
    const answer = await post(key, operation(first));
    expect(answer.body.errors).toBeUndefined();
    const orderId = answer.body.data.place.id as number;
    const [line] = answer.body.data.place.items as { id: number }[];
    expect(answer.body.data.place.items).toEqual([{ id: line.id, label: 'FIRST' }]);
    const added = await post(
      undefined,
      `mutation { addLine(orderId: ${orderId}, label: "second") }`,
    );
    expect(added.body).toEqual({ data: { addLine: true } });
    const again = await post(key, operation(retry));
    expect(again.body).toEqual({
      data: {
        place: {
          id: orderId,
          items: [
            { id: line.id + 1, label: 'SECOND' },
            { id: line.id, label: 'FIRST' },
          ],
        },
      },
      extensions: { idempotency: { replayed: ['place'] } },
    });
  };

  it('control: the retry a document of its own (its first run, uncompiled): each line its own label', async () => {
    await run('adv89-jit-union-fresh', 'PlaceFresh', 'PlaceFreshRetry');
  });

  it('the retry the same document (compiled, jit: 1): each line its own label', async () => {
    await run('adv89-jit-union-same', 'PlaceSame', 'PlaceSame');
  });
});
