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
 * Adversary 84 (graphql): a union list inside a field middleware's output whose items are
 * Promises (a DataLoader's `ids.map((id) => loader.load(id))`, the usual way to batch the
 * rows of a list; GraphQL awaits each item) has no member noted for its items: on Mercurius
 * (graphql-js, no `jit`) a replay hands the stored plain items to the app's `resolveType()`,
 * which tells them by a discriminator that is no field (`kind`), so every card is answered as
 * a bank account, with no error: `{ id: 1, iban: null }` where the first answer had
 * `{ id: 1, last4: "4242" }`.
 *
 * User code: `createUnionType({ name: 'Payment', types: () => [Card, Bank], resolveType: (v)
 * => (v.kind === 'card' ? Card : Bank) })`; `Wallet { id, payments: [Payment] }` behind a
 * logging field middleware (Nest's own example: `const value = await next(); return value`);
 * the mutation returns the wallet with `payments: ids.map((id) => loader.load(id))` (a
 * DataLoader-style batch loader, written out here: one query for all ids). The client selects
 * `payments { ... on Card { id last4 } ... on Bank { id iban } }` (no `__typename`).
 * `MercuriusDriver` without `jit`, on Fastify.
 *
 * Code path: lib/graphql/middleware-outputs.ts `mark` -> `indexItems` (lib/graphql/
 * item-indexes.ts) notes each item's place by the item value it holds, here the Promise
 * (`place(list, held, indexes)` for an abstract type, whatever `held` is); GraphQL's
 * `resolveType()` is then given the row the Promise settled to, which `itemIndexes` does not
 * find (`byItem.get(source)`): undefined, so the `resolveType()` wrapper (lib/graphql/
 * replayed-member.ts `answerFirst`) notes no member. The replay (`outputValue`) finds neither
 * a member nor a `__typename`, and the app's `resolveType()` reads `kind` from the stored
 * plain item: undefined, so `Bank`. (The list itself given as a Promise: adversary84-graphql-
 * middleware-union-list-promise, on Apollo.)
 *
 * Docs (docs/guides/graphql.md, "Field middleware: its output, as the first answer gave it"):
 * "Each output comes back on a replay with ... a union's or an interface's member as the first
 * answer's `resolveType()` told it"; "A union's or an interface's member in a list is noted at
 * each place of the item"; the only exception named is "The items of a list a getter gives
 * anew on each read (new objects each time)". DataLoader is the batching GraphQL's docs teach.
 *
 * Severity: high: a replay answers a different value with no error (a card answered as a bank
 * account with a null IBAN), on Mercurius' default setting.
 *
 * Fails now: the first answer `payments: [{ id: 1, last4: "4242" }, { id: 2, iban: "DE89 3704" }]`,
 * the replay `payments: [{ id: 1, iban: null }, { id: 2, iban: "DE89 3704" }]`, no error, with
 * the replay marker. Control (the rows loaded first, the items plain objects) passes.
 *
 * Suggested fix: an item that is a Promise is placed by what it settles to (walk it when it
 * settles, before GraphQL's `resolveType()` for it runs: graphql-js awaits it first), as
 * `completedOutput` awaits one; where a listed item has no place, answer the replay an error
 * (`field_output_pending`) rather than ask the app's `resolveType()` with the stored data.
 *
 * Fixed: `indexItems` (lib/graphql/item-indexes.ts) places an item that is a native Promise by
 * what it settles to, walked in a callback registered before graphql-js's own on that Promise
 * (so before its `resolveType()` runs). (commit: see git log, fix84gql2 "item places: Promises
 * walked when they settle")
 */
let pool: Pool;

/** Nest's example field middleware: logs the value, returns it as it is. */
const logged: FieldMiddleware = async (_ctx, next) => {
  const value: unknown = await next();
  return value;
};

@ObjectType()
class Card {
  @Field(() => Int)
  id!: number;

  @Field({ nullable: true })
  last4?: string;
}

@ObjectType()
class Bank {
  @Field(() => Int)
  id!: number;

  @Field({ nullable: true })
  iban?: string;
}

const Payment = createUnionType({
  name: 'Payment',
  types: () => [Card, Bank] as const,
  resolveType: (value: { kind?: string }) => (value.kind === 'card' ? Card : Bank),
});

@ObjectType()
class Wallet {
  @Field(() => Int)
  id!: number;

  @Field(() => [Payment])
  payments!: unknown;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Wallet, { middleware: [logged] })
  wallet!: Wallet;
}

type Row = { id: number; kind: string; last4: string | null; iban: string | null };

/** A DataLoader-style batch loader: `load(id)` calls of one tick answered by one query. */
class PaymentsLoader {
  private batch: { id: number; resolve: (row: Row) => void; reject: (e: unknown) => void }[] = [];

  load(id: number): Promise<Row> {
    return new Promise<Row>((resolve, reject) => {
      if (this.batch.length === 0) process.nextTick(() => void this.dispatch());
      this.batch.push({ id, resolve, reject });
    });
  }

  private async dispatch(): Promise<void> {
    const batch = this.batch;
    this.batch = [];
    try {
      const { rows } = await pool.query<Row>(
        'SELECT id, kind, last4, iban FROM payments WHERE id = ANY($1)',
        [batch.map((each) => each.id)],
      );
      for (const each of batch) each.resolve(rows.find((row) => row.id === each.id)!);
    } catch (error) {
      for (const each of batch) each.reject(error);
    }
  }
}

let asPromises = true;

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const loader = new PaymentsLoader();
    const items = [1, 2].map((id) => loader.load(id));
    const payments = asPromises ? items : await Promise.all(items);
    return { id: rows[0].id, wallet: { id: 7, payments } };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 84: a union list of item Promises (a batch loader) inside a middleware output, on Mercurius', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv84_gql_mw_union_items', {
      module: OrdersModule,
      max: 6,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
        await admin.query(
          'CREATE TABLE payments (id int PRIMARY KEY, kind text NOT NULL, last4 text, iban text)',
        );
        await admin.query(
          "INSERT INTO payments VALUES (1, 'card', '4242', NULL), (2, 'bank', NULL, 'DE89 3704')",
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(
        JSON.stringify({
          query:
            'mutation { createOrder { id wallet { id payments { ... on Card { id last4 } ... on Bank { id iban } } } } }',
        }),
      );

  const check = async (key: string) => {
    const first = await post(key);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createOrder.wallet.payments).toEqual([
      { id: 1, last4: '4242' },
      { id: 2, iban: 'DE89 3704' },
    ]);
    const again = await post(key);
    expect(again.body).toEqual({
      data: first.body.data,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
    const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders');
    return rows[0].n;
  };

  it('control: the rows loaded first, replayed as the first answer', async () => {
    asPromises = false;
    await check('adv84-union-items-rows');
  });

  it('each payment a loader Promise: the replay answers each card as a card', async () => {
    asPromises = true;
    await check('adv84-union-items-promises');
  });
});
