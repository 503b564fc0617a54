import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
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
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 84 (graphql): a union list inside a field middleware's output, given as a Promise
 * (a list the resolver loads asynchronously, `payments: this.loadPayments(id)`, or a TypeORM
 * lazy relation: GraphQL awaits a Promise at any depth) has no member noted for its items: a
 * replay hands the stored plain items to the app's `resolveType()`, which tells them by a
 * discriminator that is no field (`kind`), so every card is answered as a bank account, with
 * no error: `{ id: 1, iban: null }` where the first answer had `{ id: 1, last4: "4242" }`.
 *
 * User code: `createUnionType({ name: 'Payment', types: () => [Card, Bank], resolveType: (v)
 * => (v.kind === 'card' ? Card : Bank) })`; `Wallet { id, payments: [Payment] }` behind a
 * logging field middleware (`@Field(() => Wallet, { middleware: [logged] })`, Nest's own
 * example: `const value = await next(); log; return value`); the mutation returns the wallet
 * with `payments` a Promise of the rows. The client selects `payments { ... on Card { id last4
 * } ... on Bank { id iban } }` (no `__typename`, as most clients write it).
 *
 * Code path: lib/graphql/middleware-outputs.ts `mark` calls `indexItems` (lib/graphql/
 * item-indexes.ts) on the middleware's result before GraphQL completes it; `walk` reads
 * `held.payments`, a Promise, which `listItems` does not read (not iterable): no place is
 * noted. At completion the `resolveType()` wrapper (lib/graphql/replayed-member.ts
 * `answerFirst`) asks `itemIndexes`, which answers undefined for a listed item with no place,
 * so no member is noted. The replay (`outputValue`, middleware-outputs.ts) finds no member and
 * no `__typename`, gives the stored item as a plain object, and the app's `resolveType()` reads
 * `kind` from it: undefined, so `Bank`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware: its output, as the first answer gave it"):
 * "Each output comes back on a replay with ... a union's or an interface's member as the first
 * answer's `resolveType()` told it"; "A union's or an interface's member in a list is noted at
 * each place of the item"; the only exception named is "The items of a list a getter gives
 * anew on each read (new objects each time)". And "The answers are the same bytes".
 *
 * Severity: high: a replay answers a different value with no error (a card answered as a bank
 * account with a null IBAN); the client cannot tell without `__typename`.
 *
 * Fails now: the first answer `payments: [{ id: 1, last4: "4242" }, { id: 2, iban: "DE89 3704" }]`,
 * the replay `payments: [{ id: 1, iban: null }, { id: 2, iban: "DE89 3704" }]`, no error, with
 * the replay marker. Control (the same list as an array) passes.
 *
 * Suggested fix: note list item places when a Promise under the output settles (walk it
 * again then, as `completedOutput` awaits one), or wrap the Promise so its settled list is
 * walked before GraphQL completes it; where no place can be told for a listed item, note it
 * so that the replay answers an error (`field_output_pending`) rather than asking the app's
 * `resolveType()` with data that lacks what it reads.
 *
 * Fixed: `indexItems` (lib/graphql/item-indexes.ts) walks a native Promise at any depth when it
 * settles (its callback registered before GraphQL reads the Promise, so it runs before GraphQL
 * completes the list): the settled items are placed, and their members noted at their own
 * places. (commit: see git log, fix84gql2 "item places: Promises walked when they settle")
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

async function loadPayments(): Promise<Row[]> {
  const { rows } = await pool.query<Row>('SELECT id, kind, last4, iban FROM payments ORDER BY id');
  return rows;
}

let asPromise = true;

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
    const payments = asPromise ? loadPayments() : await loadPayments();
    return { id: rows[0].id, wallet: { id: 7, payments } };
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
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 84: a union list given as a Promise inside a middleware output', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv84_gql_mw_union_promise', {
      module: OrdersModule,
      max: 6,
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

  it('control: the payments given as an array, replayed as the first answer', async () => {
    asPromise = false;
    await check('adv84-union-array');
  });

  it('the payments given as a Promise: the replay answers each card as a card', async () => {
    asPromise = true;
    await check('adv84-union-promise');
  });
});
