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
  Query,
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
 * Adversary 82 (graphql): on Mercurius with `jit`, a union (or interface) list behind field
 * middleware whose first answer runs compiled (its document ran before: any document after
 * its first run, with `jit: 1`) stores each item's member at a wrong key, and every replay of
 * it answers `createOrder: null` with "Cannot return null for non-nullable field Bank.iban."
 * (a `Card` answered as a `Bank`). A first answer that is its document's first run is
 * replayed right (adversary 81's fix), compiled or not.
 *
 * The app: `union Method = Card | Bank` told by a field of its own, as in Nest's recipe
 * (`value.last4 ? Card : Bank`); `Order.methods: [Method]` behind Nest's field middleware
 * `usable`; `createOrder` with `@Idempotent()`; Mercurius with `jit: 1`. Orders are placed
 * with one operation (`mutation Warm { ... }`) by many clients: from its second run on, each
 * first answer runs compiled.
 *
 * Why: `resolveType()`'s wrapper notes the member at `[...pathOf(info),
 * ...itemIndexes(context, source)]` (lib/graphql/replayed-member.ts:93): the item's list
 * indexes (item-indexes.ts) added to the path graphql-js gives a list item's
 * `resolveType()`, the list field's. graphql-jit gives the item's own path, its index
 * already in it, so the index is added twice: the stored `members` read
 * `{ "methods.0.0": "Card", "methods.1.1": "Bank" }` (nested `[[Method]]`:
 * `grid.0.1.0.1`), never `methods.0`. The replay finds no member at `methods.0` and asks the
 * app's `resolveType()`, which reads `last4`, not stored (not selected): `Bank`. The first
 * answer's named keys inside the output are lost too (`names` holds `methods` only).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "Each output comes back on a replay with
 * ... a union's or an interface's member as the first answer's `resolveType()` told it"; "under
 * Mercurius' `jit` too, a union's members included".
 *
 * Control (passes): the first answer is its document's first run (not compiled); its replays
 * run compiled.
 *
 * Severity: high (in a busy app every first answer of such a mutation runs compiled: each
 * retry of a committed order answers `createOrder: null` and an error).
 *
 * Fails now: the replay answers `{ data: { createOrder: null }, errors: [{ message: 'Cannot
 * return null for non-nullable field Bank.iban.', path: ['createOrder', 'methods', '0',
 * 'iban'] }] }`.
 *
 * Suggested fix: add the item's indexes only where the path `resolveType()` is given stops at
 * the list field (graphql-js): where it already ends in the item's indexes (graphql-jit), take
 * it as it is; e.g. compare `info.path`'s last key with the list field's, or count the list
 * levels between `info.path` and the field's return type.
 *
 * Fixed: `memberPath` (lib/graphql/replayed-member.ts) adds the item's indexes only to a path
 * that ends at the list field (graphql-js); a path that ends in an index (graphql-jit gives the
 * item's own) is taken as it is.
 */
let pool: Pool;

/** Nest's field middleware: the methods the caller may use (here: all of them). */
const usable: FieldMiddleware = async (_ctx, next) => {
  const methods = (await next()) as unknown[];
  return methods.filter(() => true);
};

@ObjectType()
class Card {
  @Field()
  label!: string;

  @Field()
  last4!: string;
}

@ObjectType()
class Bank {
  @Field()
  label!: string;

  @Field()
  iban!: string;
}

/** As in Nest's recipe: each member told by a field of its own. */
const Method = createUnionType({
  name: 'Method',
  types: () => [Card, Bank] as const,
  resolveType: (value: { last4?: string }) => (value.last4 ? Card : Bank),
});

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Method], { middleware: [usable] })
  methods!: (typeof Method)[];
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return {
      id: rows[0].id,
      methods: [
        { label: 'visa', last4: '4242' },
        { label: 'sepa', iban: 'DE02' },
      ] as (typeof Method)[],
    };
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

/** The same operation, each under a name of its own: Mercurius compiles each document apart. */
const operation = (name: string) =>
  `mutation ${name} { createOrder { id methods { ... on Card { label } ... on Bank { iban } } } }`;

describe("adversary 82: Mercurius jit, a union list's members at a first answer run compiled", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_gql_jit_first_union', {
      module: OrdersModule,
      max: 6,
      adapter: 'fastify',
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
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const answer = {
    data: {
      createOrder: { id: expect.any(Number), methods: [{ label: 'visa' }, { iban: 'DE02' }] },
    },
  };
  const replayed = { idempotency: { replayed: ['createOrder'] } };

  it("control: the first answer is the document's first run, its replays compiled", async () => {
    const first = await post('adv82-jit-first-ok', operation('Fresh'));
    expect(first.body).toEqual(answer);
    for (let i = 0; i < 3; i++) {
      const again = await post('adv82-jit-first-ok', operation('Fresh'));
      expect(again.body).toEqual({ ...first.body, extensions: replayed });
    }
  });

  it('the first answer run compiled (the document ran before): its replays answer it', async () => {
    // Other orders placed with the same document before: it is compiled by now (jit: 1).
    for (let i = 0; i < 2; i++) await post(`adv82-jit-first-warm-${i}`, operation('Warm'));
    const first = await post('adv82-jit-first-warm', operation('Warm'));
    expect(first.body).toEqual(answer);
    const again = await post('adv82-jit-first-warm', operation('Warm'));
    // Fails: createOrder null, "Cannot return null for non-nullable field Bank.iban.".
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });
});
