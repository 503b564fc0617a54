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
 * Adversary 82 (graphql): a union list behind field middleware that holds the same object
 * twice (a payee paid twice, one object per payee as a DataLoader or an ORM's identity map
 * gives them), or the same objects in two such lists, is replayed with the members at the wrong
 * places: the retry that sends the first call's very operation answers `createTransfer: null`
 * with "Cannot return null for non-nullable field Bank.iban." (or `field_not_stored`), where
 * the first call answered the whole transfer.
 *
 * The app: `union Payee = Card | Bank` told by a field of its own, as in Nest's recipe
 * (`value.last4 ? Card : Bank`); `Transfer.payees` and `Transfer.favourites`, lists of `Payee`
 * behind Nest's field middleware `visible` (it filters what the caller may see); the
 * `@Idempotent()` mutation `createTransfer` answers `payees: [card, bank, card]` and
 * `favourites: [bank, card]`, `recent: [card, bank]` (the same two objects). Apollo on Express.
 *
 * Why: the member a list item's `resolveType()` told is noted at the item's path by its list
 * indexes, which `indexItems` (lib/graphql/item-indexes.ts) keeps by the item object itself,
 * one entry per object and context: a second place of the same object in the list is skipped
 * (`seen`, item-indexes.ts:62), and a second list's walk overwrites the first's entry
 * (item-indexes.ts:69). `resolveType()`'s wrapper (lib/graphql/replayed-member.ts:93) then
 * notes both places of the object at one index (`payees.0` twice, `payees.2` never), or at
 * the other list's index (`recent.0` noted Bank, `recent.1` Card). On the replay, the item
 * with no member noted is told by the app's `resolveType()` on the stored data (`last4` was
 * not selected: `Bank`), and the one noted wrong is answered as the other member: its fields
 * are not in the stored output.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "Each output comes back on a replay with
 * ... a union's or an interface's member as the first answer's `resolveType()` told it"; and
 * (on the class of its objects) "a replay is answered as the member it was stored as, before
 * the app's `resolveType()` runs (which may tell members by data the selection did not store,
 * as Nest's recipe tells a `Book` by its `title`)".
 *
 * Control (passes): each object once, in one list.
 *
 * Severity: high (the retry of a committed transfer answers `createTransfer: null` and an
 * error: the client believes it failed; or, with members whose fields overlap, answers a card
 * as a bank).
 *
 * Fails now: the object twice in `payees`: `data: { createTransfer: null }` with "Cannot return
 * null for non-nullable field Bank.iban." at `createTransfer.payees.2.iban`; the same objects
 * in two lists: `createTransfer: null` with `field_not_stored` at
 * `createTransfer.recent.0.iban`.
 *
 * Suggested fix: note the member at the path graphql-js completes, not by the object: mark
 * each item by its own place (a wrapper per item, or a queue of index lists per object in the
 * order graphql-js completes them, per list field), or read the member when the hook stores
 * the output, from the answer's items and the first answer's `resolveType()` per path; at the
 * least, where an object sits at more than one place, note it at each.
 *
 * Fixed: the middleware wrapper notes each member item's places by the list field that holds
 * it, in the order graphql-js completes them (`indexItems`, lib/graphql/item-indexes.ts); the
 * `resolveType()` wrapper takes the n-th place for the n-th time the item is told at that
 * list's path (`itemIndexes`), so an object twice in a list, or in two lists, is noted at each
 * of its places; where the places cannot be told apart (the same object under one field of two
 * parents) nothing is noted rather than another item's place (lib/graphql/replayed-member.ts).
 */
let pool: Pool;

/** Nest's field middleware: the payees the caller may see (here: all of them, as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const payees = (await next()) as unknown[];
  return payees.filter(() => true);
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
const Payee = createUnionType({
  name: 'Payee',
  types: () => [Card, Bank] as const,
  resolveType: (value: { last4?: string }) => (value.last4 ? Card : Bank),
});

@ObjectType()
class Transfer {
  @Field(() => Int)
  id!: number;

  @Field(() => [Payee], { middleware: [visible] })
  payees!: (typeof Payee)[];

  @Field(() => [Payee], { middleware: [visible] })
  favourites!: (typeof Payee)[];

  @Field(() => [Payee], { middleware: [visible] })
  recent!: (typeof Payee)[];
}

@Resolver(() => Transfer)
class TransfersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Transfer, { nullable: true })
  @Idempotent()
  async createTransfer(): Promise<Transfer> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO transfers DEFAULT VALUES RETURNING id',
    );
    // One object per payee, as a DataLoader or an ORM's identity map gives them: a payee
    // paid twice is the same object twice.
    const card = { label: 'visa', last4: '4242' } as Card;
    const bank = { label: 'sepa', iban: 'DE02' } as Bank;
    return {
      id: rows[0].id,
      payees: [card, bank, card],
      favourites: [bank, card],
      recent: [card, bank],
    };
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
  providers: [TransfersResolver],
})
class TransfersModule {}

const MEMBERS = '{ ... on Card { label } ... on Bank { iban } }';

describe('adversary 82: the same object twice in union lists behind field middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_gql_mw_union_same_obj', {
      module: TransfersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY)');
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

  const replayed = { idempotency: { replayed: ['createTransfer'] } };

  it('control: each object once in the list', async () => {
    const query = `mutation { createTransfer { id favourites ${MEMBERS} } }`;
    const first = await post('adv82-same-ok', query);
    expect(first.body).toEqual({
      data: {
        createTransfer: {
          id: expect.any(Number),
          favourites: [{ iban: 'DE02' }, { label: 'visa' }],
        },
      },
    });
    const again = await post('adv82-same-ok', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it('a payee twice in one list: the replay answers the first answer', async () => {
    const query = `mutation { createTransfer { id payees ${MEMBERS} } }`;
    const first = await post('adv82-same-twice', query);
    expect(first.body).toEqual({
      data: {
        createTransfer: {
          id: expect.any(Number),
          payees: [{ label: 'visa' }, { iban: 'DE02' }, { label: 'visa' }],
        },
      },
    });
    const again = await post('adv82-same-twice', query);
    // Fails: createTransfer null, "Cannot return null for non-nullable field Bank.iban.".
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it('the same payees in two lists: the replay answers the first answer', async () => {
    const query = `mutation { createTransfer { id recent ${MEMBERS} favourites ${MEMBERS} } }`;
    const first = await post('adv82-same-two-lists', query);
    expect(first.body).toEqual({
      data: {
        createTransfer: {
          id: expect.any(Number),
          recent: [{ label: 'visa' }, { iban: 'DE02' }],
          favourites: [{ iban: 'DE02' }, { label: 'visa' }],
        },
      },
    });
    const again = await post('adv82-same-two-lists', query);
    // Fails: createTransfer null, field_not_stored at createTransfer.recent.0.iban.
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });
});
