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
 * Adversary 81 (graphql): a list of a union (or an interface) behind field middleware is
 * replayed with every item as the *last* item's member: the retry that sends the first call's
 * very operation gets `createOrder: null` and "Cannot return null for non-nullable field
 * Bank.iban." at the card (or, where a member's fields are not selected, the card's data
 * gone: `[{ last4: '4242' }, {}]` replayed as `[{}, {}]`).
 *
 * The app: `Order { id payees: [Payee!]! }`, `Payee = Card | Bank` made with Nest's
 * `createUnionType` and a `resolveType` that reads a property (`v.kind === 'card' ? Card :
 * Bank`, as Nest's recipe reads a `Book`'s `title`); `payees` behind Nest's field middleware
 * `audit` (an access check or a log that passes the value on; or the global `fieldMiddleware`,
 * Nest's `loggerMiddleware` recipe); `createOrder` with `@Idempotent()`; Apollo on Express.
 * The first call selects `payees { ... on Card { last4 } ... on Bank { iban } }`.
 *
 * Why: the member of each object under a middleware output is noted at the first answer by
 * the wrapper of the type's `resolveType()` (`answerFirst` -> `noteMember(context,
 * pathOf(info), told)`, lib/graphql/replayed-member.ts), by `info`'s path; but graphql-js
 * gives `resolveType()` the *field's* info (`completeAbstractValue`), whose path has no list
 * index: every item is noted at `payees`, the last one's member winning. Stored:
 * `members: { payees: 'Bank' }`. On the replay, `outputValue` (lib/graphql/
 * middleware-outputs.ts) looks each item's member up at `payees.0`, `payees.1`: none, and no
 * `__typename` was selected, so each item goes unmarked to the app's `resolveType()`, which
 * reads a `kind` the selection did not store: `Bank` for the card.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "Each output comes back on a replay ...
 * a union's or an interface's member as the first answer's `resolveType()` told it"; and:
 * "A member of a union or an interface is answered on a replay as the member it was stored
 * as, before the app's `resolveType()` runs (which may tell members by data the selection did
 * not store, as Nest's recipe tells a `Book` by its `title`)".
 *
 * Control (passes): a single `Payee` (no list) behind the same middleware, a card: replayed as
 * the card.
 *
 * Severity: high (the very same retry of a committed order answers `createOrder: null` with an
 * INTERNAL_SERVER_ERROR, every time; a client that gives up and uses a new key orders again).
 *
 * Fails now: the replay answers `{ data: { createOrder: null }, errors: [{ message: 'Cannot
 * return null for non-nullable field Bank.iban.', path: ['createOrder', 'payees', 0, 'iban']
 * }] }`.
 *
 * Suggested fix: note the member by the item's own path: graphql-js does not give it to
 * `resolveType()`, so note it where the item's path is known (mark each value of the
 * middleware's result with its index before GraphQL completes it, or read the members from
 * the answer's data by a `__typename` the library adds to the stored selection), or store
 * each object's `__typename` (the member's name) in the stored output itself.
 *
 * Fixed: the middleware wrapper marks each union or interface item of its output with its list
 * indexes before GraphQL completes it (`indexItems`, lib/graphql/item-indexes.ts, by the
 * operation's context), and the `resolveType()` wrapper notes the member at the item's own path
 * (lib/graphql/replayed-member.ts).
 */
let pool: Pool;

/** Nest's field middleware that passes the value on (an access check, a log). */
const audit: FieldMiddleware = async (_ctx, next) => next();

@ObjectType()
class Card {
  @Field()
  last4!: string;
}

@ObjectType()
class Bank {
  @Field()
  iban!: string;
}

const Payee = createUnionType({
  name: 'Payee',
  types: () => [Card, Bank] as const,
  resolveType: (value: { kind?: string }) => (value.kind === 'card' ? Card : Bank),
});

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Payee], { middleware: [audit] })
  payees!: (typeof Payee)[];

  @Field(() => Payee, { middleware: [audit] })
  payee!: typeof Payee;
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
    const card = { kind: 'card', last4: '4242' } as Card;
    const bank = { kind: 'bank', iban: 'DE89 3704' } as Bank;
    return { id: rows[0].id, payees: [card, bank], payee: card };
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

describe('adversary 81: a union list behind field middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_union_list', {
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
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const replayed = { idempotency: { replayed: ['createOrder'] } };

  it('control: a single union value, replayed as its member', async () => {
    const query =
      'mutation { createOrder { id payee { ... on Card { last4 } ... on Bank { iban } } } }';
    const first = await post('adv81-union-one', query);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), payee: { last4: '4242' } } },
    });
    const again = await post('adv81-union-one', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it('a list of it: each item replayed as its own member', async () => {
    const query =
      'mutation { createOrder { id payees { ... on Card { last4 } ... on Bank { iban } } } }';
    const first = await post('adv81-union-list', query);
    expect(first.body).toEqual({
      data: {
        createOrder: {
          id: expect.any(Number),
          payees: [{ last4: '4242' }, { iban: 'DE89 3704' }],
        },
      },
    });
    const again = await post('adv81-union-list', query);
    // Fails: createOrder null, "Cannot return null for non-nullable field Bank.iban." at item 0.
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });
});
