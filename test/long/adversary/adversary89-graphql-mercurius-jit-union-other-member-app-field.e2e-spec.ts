import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import {
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
 * (`Placed = Quote | Order`) whose two members both have a `lines: [Line]` field: a `Quote`
 * holds its lines as data, an `Order` resolves them with a `@ResolveField()`. `Line.label` is
 * behind Nest field middleware (here it stamps a print run: any middleware that is not a pure
 * function of its input, an audit, a lookup, a counter). The mutation answers a Quote, so the
 * label's middleware output is inside the mutation's stored answer. A retry of the same
 * document (now compiled by graphql-jit) runs the middleware again, on an input the replay
 * does not have: `label: "undefined (print 3)"` where the first answer said `"first (print 2)"`.
 *
 * User code: `createUnionType({ name: 'Placed', types: () => [Quote, Order] })`;
 * `@Mutation(() => Placed) @Idempotent() place()` returning a `Quote` with its `lines`;
 * `@ResolveField(() => [Line]) lines()` on Order; `@Field({ middleware: [stamp] }) label` on
 * Line; the operation selects both members: `... on Quote { id lines { id label } } ... on
 * Order { id lines { id label } }`; `GraphQLModule.forRoot({ driver: MercuriusDriver, jit: 1 })`.
 *
 * Code path: lib/graphql/middleware-outputs.ts `appResolvedBetween` -> lib/graphql/named-path.ts
 * `namedSteps`: graphql-jit tells no `typename`, so at the union step `onField` is told of
 * every possible type that selects `lines` (Quote's, a property, and Order's, the app's), and
 * `appResolvedBetween` takes Order's `@ResolveField()` for one between the mutation and
 * `label`, though the value is a Quote; `replayedOutputAt` then treats `label` as read anew
 * under an app field and runs Nest's middleware chain on the rebuilt Quote line, whose input
 * (`label`'s raw value, never stored) is not there.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a replay answers that output: the
 * middleware never runs on a replay ... under Mercurius' `jit` too"; "Its input ... is read by
 * the middleware alone, once, and never stored".
 *
 * Severity: high: the middleware runs again on every compiled replay (its effects twice) and
 * the replay answers another value than the first answer (`undefined (print 3)`).
 *
 * Fails now (unskip the it.skip and run this file): `label: "undefined (print 3)"` (first answer
 * `"first (print 2)"`), and the middleware ran a third time.
 * Control (passes): the same retry as a document of its own name (its first run, uncompiled:
 * graphql-js tells each step's typename, Quote).
 *
 * Suggested fix: under an abstract type without a `typename` (graphql-jit), tell the member
 * the parent value is (the first answer's members, `__replayedMember` of the rebuilt value, or
 * the stored output's own member at that path) instead of counting an app field of any
 * possible type; where it cannot be told, prefer the stored output when one is stored at that
 * path.
 *
 * Fixed (session of 2026-12-06, third): the replay's `resolveType()` wrapper notes the member
 * it answered each replayed object as, by its place (lib/graphql/answered-members.ts, noted in
 * lib/graphql/replayed-member.ts); lib/graphql/named-path.ts `namedSteps` reads a union step
 * without a `typename` by that member (`memberAt`) where it is known, so `appResolvedBetween`
 * (lib/graphql/middleware-outputs.ts) sees the Quote's own `lines` (a property) and the stored
 * label is answered.
 */
let pool: Pool;

/** How many times the middleware ran. */
let stamped = 0;

/** Nest's field middleware: the label with the print run it was stamped in. */
const stamp: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string | null;
  stamped += 1;
  return value === null ? null : `${value} (print ${stamped})`;
};

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  @Field({ middleware: [stamp] })
  label!: string;
}

@ObjectType()
class Quote {
  @Field(() => Int)
  id!: number;

  /** A quote's lines: plain data it holds, priced once. */
  @Field(() => [Line])
  lines!: Line[];
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
  async place(): Promise<Quote> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO quotes DEFAULT VALUES RETURNING id',
    );
    // A cart that needs approval: a quote, its lines given with it.
    return Object.assign(new Quote(), {
      id: rows[0].id,
      kind: 'quote',
      lines: [{ id: 1, label: 'first' }],
    });
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

describe('adversary 89: Mercurius jit, a union whose other member resolves the same field itself', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv89_gql_jit_union_member', {
      module: OrdersModule,
      max: 6,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
        await admin.query('CREATE TABLE quotes (id serial PRIMARY KEY)');
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
    `mutation ${name} { place { ... on Quote { id lines { id label } } ` +
    `... on Order { id lines { id label } } } }`;

  const run = async (key: string, first: string, retry: string) => {
    const answer = await post(key, operation(first));
    expect(answer.body.errors).toBeUndefined();
    const runs = stamped;
    const again = await post(key, operation(retry));
    expect(again.body).toEqual({
      ...answer.body,
      extensions: { idempotency: { replayed: ['place'] } },
    });
    // The middleware never runs on a replay.
    expect(stamped).toBe(runs);
  };

  it('control: the retry a document of its own (its first run, uncompiled): the labels as first answered', async () => {
    await run('adv89-jit-member-fresh', 'PlaceFresh', 'PlaceFreshRetry');
  });

  it('the retry the same document (compiled, jit: 1): the labels as first answered', async () => {
    await run('adv89-jit-member-same', 'PlaceSame', 'PlaceSame');
  });
});
