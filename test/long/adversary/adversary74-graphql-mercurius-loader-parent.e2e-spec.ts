import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
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
 * Adversary 74: on Mercurius, a field resolved by one of Mercurius' `loaders` (its batched
 * field resolvers, Mercurius' answer to N+1) under an idempotent mutation reads its parent's
 * data on a replay that the first answer had and the store dropped: the replay answers
 * another value (here the loader's lookup by the parent's `accountId` finds nothing: the
 * field null), where the first answer had the account.
 *
 * The app: the docs' Mercurius setup; `Transfer { id amount accountId account }`, `account`
 * resolved by a loader (`loaders: { Transfer: { account: async (queries) =>
 * queries.map(({ obj }) => accounts.get(obj.accountId)) } }`), the mutation
 * `createTransfer(accountId, amount)` with the `Idempotency-Key` header. The client selects
 * `{ id amount account { name } }`: not `accountId`, which only the loader reads.
 *
 * Why: what a replay keeps of an object for the resolvers under it depends on
 * `isResolvedByApp` (lib/graphql/resolved-fields.ts, wire-value.ts): only fields with a Nest
 * `@ResolveField()` are known (`noteResolvedField`, from the start-up scan of Nest's
 * classes). A field whose resolver Mercurius installs (`loaders`, which set the schema
 * field's `resolve`) is taken for a plain field: its object does not keep its unselected
 * fields' own data, so `accountId` is not stored, and on a replay the loader reads
 * `undefined`.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "A `@ResolveField()`
 * reads its parent, so each object also keeps ... An object one of whose selected fields has
 * a `@ResolveField()` keeps its unselected fields' own data too (plain properties only ...),
 * since that resolver may read any of its parent's ... A replay's resolvers get the same
 * values as the first call's, and the answer is the same bytes." A resolver of the schema is
 * one whether Nest's decorator or Mercurius' loader put it there: the replay's data equals the
 * first answer's.
 *
 * Control: the retry selects `accountId` too (the first call selected it): the loader reads
 * it from the stored field, the replay equals the first answer; passes.
 *
 * Severity: high (a wrong answer on a replay: the account the transfer went to answered
 * null, though the first answer named it).
 *
 * Suggested fix: tell a field resolved by the app from the schema, not Nest's decorators: a
 * field whose `resolve` is not GraphQL's default one (Nest's own field wrappers told apart),
 * or keep the unselected own data of every object whose type has fields resolved outside
 * the stored value (as for `@ResolveField()`).
 *
 * Fixed: `isResolvedByApp` (lib/graphql/resolved-fields.ts) reads the built schema too: a
 * field whose `resolve` is neither GraphQL's default nor Nest's read of the property
 * (`isAppResolver`, against the code of the installed Nest's reader: `loadPlainReaders`) is
 * the app's, as a `@ResolveField()` is: its parent keeps its unselected own data. A loader's
 * field is then resolved again on a replay from the kept `accountId`.
 */
let pool: Pool;

const accounts = new Map<number, { name: string }>([
  [7, { name: 'Ada' }],
  [8, { name: 'Grace' }],
]);

@ObjectType()
class Account {
  @Field()
  name!: string;
}

@ObjectType()
class Transfer {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;

  @Field(() => Int)
  accountId!: number;

  // Resolved by Mercurius' loader below.
  @Field(() => Account, { nullable: true })
  account?: Account;
}

@Resolver(() => Transfer)
class TransfersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Transfer)
  @Idempotent()
  async createTransfer(
    @Args('accountId', { type: () => Int }) accountId: number,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<Transfer> {
    const { rows } = await pool.query<Transfer>(
      'INSERT INTO transfers (account_id, amount) VALUES ($1, $2) ' +
        'RETURNING id, amount, account_id AS "accountId"',
      [accountId, amount],
    );
    return rows[0];
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      autoSchemaFile: true,
      graphiql: false,
      loaders: {
        Transfer: {
          // One lookup for all the transfers of the answer; null for an unknown account.
          account: (queries: { obj: { accountId?: number } }[]) =>
            Promise.resolve(
              queries.map(({ obj }) =>
                obj.accountId === undefined ? null : (accounts.get(obj.accountId) ?? null),
              ),
            ),
        },
      },
    }),
  ],
  providers: [TransfersResolver],
})
class TransfersModule {}

describe("adversary 74: a Mercurius loader's field under an idempotent mutation, replayed", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv74_gql_mercurius_loader', {
      module: TransfersModule,
      adapter: 'fastify',
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE transfers (id serial PRIMARY KEY, account_id int NOT NULL, amount int NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query }));

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM transfers')).rows[0].n;

  it('control: the loader reads a field the operation selects, the replay is the first answer', async () => {
    const before = await count();
    const query =
      'mutation { createTransfer(accountId: 8, amount: 5) { id accountId account { name } } }';
    const first = await post('adv74-loader-c', query);
    expect(first.body).toEqual({
      data: {
        createTransfer: { id: expect.any(Number), accountId: 8, account: { name: 'Grace' } },
      },
    });
    const again = await post('adv74-loader-c', query);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createTransfer'] } },
    });
    expect(await count()).toBe(before + 1);
  });

  it("the loader reads its parent's unselected accountId: the replay is the first answer", async () => {
    const before = await count();
    const query =
      'mutation { createTransfer(accountId: 7, amount: 10) { id amount account { name } } }';
    const first = await post('adv74-loader-a', query);
    expect(first.body).toEqual({
      data: { createTransfer: { id: expect.any(Number), amount: 10, account: { name: 'Ada' } } },
    });
    const again = await post('adv74-loader-a', query);
    // Fails: account null (the loader read accountId undefined on the replay's parent).
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createTransfer'] } },
    });
    expect(await count()).toBe(before + 1);
  });
});
