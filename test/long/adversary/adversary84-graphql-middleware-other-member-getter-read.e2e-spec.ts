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
 * Adversary 84 (graphql): the walk that notes union list items' places in a middleware output
 * (`indexItems`) reads, on each item, the fields every member of the union selects, not only
 * the item's own member's: a `Card` item is read for the `history` a `... on Bank { history
 * {...} }` selects, so the card entity's own `history` getter (a lazy relation, an API
 * client's call: not a field of `Card`, never selected for a card) runs on every first answer.
 * Without the library (control: the same app, no `@Idempotent()`) it never runs.
 *
 * User code: `createUnionType({ name: 'Payment', types: () => [Card, Bank], resolveType })`;
 * `Card` and `Bank` entity classes, each with a `history` relation loaded on read (`get
 * history()`); `Bank.history` is a GraphQL field (`[Payment]`), `Card`'s is not;
 * `Wallet.payments: [Payment]` behind a logging field middleware. The client selects
 * `payments { ... on Card { id last4 } ... on Bank { id history { ... on Bank { id } } } }`.
 *
 * Code path: lib/graphql/item-indexes.ts `indexItems` -> `walk`: for an abstract item it
 * takes `objects = schema.getPossibleTypes(at)` and, for each, reads that member's selected
 * fields from the item (`(held as Record<string, unknown>)[property]`), whatever the item's own
 * member: a Card is read for Bank's `history`.
 *
 * Docs (docs/guides/graphql.md): "a field the operation does not select is neither read (a
 * getter is not called, a TypeORM lazy relation not loaded) nor stored"; "Field middleware":
 * "only the fields the operation selects are read to find them (a getter it does not select is
 * not called)".
 *
 * Severity: medium: an unselected relation (or a remote call) loaded for each card of each
 * first answer, in the request's time; a load that fails is a Promise no one awaits (an
 * unhandled rejection, which ends a Node process by default).
 *
 * Fails now: the card's `history` getter runs once per card at the first answer with the
 * library (2 reads for 2 cards); 0 without it (control).
 *
 * Suggested fix: walk an abstract item with its own member's selection only: tell the member
 * first (the app's `resolveType()` is what GraphQL will call; or walk after it is told, as the
 * items are completed), or read a member's fields only from an item that is of it (`isTypeOf`,
 * the class Nest registered for the member).
 *
 * Fixed: `indexItems` (lib/graphql/item-indexes.ts) no longer walks an abstract item for every
 * member's selection: where its type has a `resolveType()`, the walk of the item waits
 * (`walkAsTold`) until the `resolveType()` wrapper (lib/graphql/replayed-member.ts) has the
 * member the app told, then reads only that member's selected fields, before GraphQL completes
 * them; a type without one is read by the item's `__typename`, else (GraphQL's `isTypeOf()`)
 * every member's selection as before. (commit: see git log, fix84gql2 "item places: Promises
 * walked when they settle")
 */
let pool: Pool;
let historyReads = 0;

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

  /** The card's own history: loaded on read (a lazy relation); not a field of Card. */
  get history(): unknown[] {
    historyReads += 1;
    return [];
  }
}

@ObjectType()
class Bank {
  @Field(() => Int)
  id!: number;

  @Field({ nullable: true })
  iban?: string;

  @Field(() => [Payment], { nullable: true })
  history?: unknown[];
}

const Payment = createUnionType({
  name: 'Payment',
  types: () => [Card, Bank] as const,
  resolveType: (value: unknown) => (value instanceof Card ? Card : Bank),
});

@ObjectType()
class Wallet {
  @Field(() => Int)
  id!: number;

  @Field(() => [Payment])
  payments!: unknown[];
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Wallet, { middleware: [logged] })
  wallet!: Wallet;
}

async function place(): Promise<Order> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const card = (id: number) => Object.assign(new Card(), { id, last4: '4242' });
  const bank = Object.assign(new Bank(), { id: 3, iban: 'DE89', history: [] });
  return { id: rows[0].id, wallet: { id: 7, payments: [card(1), card(2), bank] } };
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  createOrder(): Promise<Order> {
    return place();
  }

  /** The same mutation without the library. */
  @Mutation(() => Order)
  createOrderPlain(): Promise<Order> {
    return place();
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

describe("adversary 84: a union list item read for another member's selected field", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv84_gql_mw_other_member_getter', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const SELECTION =
    '{ id wallet { payments { ... on Card { id last4 } ... on Bank { id history { ... on Bank { id } } } } } }';

  const post = (key: string | undefined, query: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(20_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send(JSON.stringify({ query }));
  };

  const payments = [
    { id: 1, last4: '4242' },
    { id: 2, last4: '4242' },
    { id: 3, history: [] },
  ];

  it('control: without the library, the card’s history is never read', async () => {
    historyReads = 0;
    const answer = await post(undefined, `mutation { createOrderPlain ${SELECTION} }`);
    expect(answer.body.errors).toBeUndefined();
    expect(answer.body.data.createOrderPlain.wallet.payments).toEqual(payments);
    expect(historyReads).toBe(0);
  });

  it('with the library: the card’s history, selected for banks only, is not read', async () => {
    historyReads = 0;
    const answer = await post('adv84-other-member', `mutation { createOrder ${SELECTION} }`);
    expect(answer.body.errors).toBeUndefined();
    expect(answer.body.data.createOrder.wallet.payments).toEqual(payments);
    expect(historyReads).toBe(0);
  });
});
