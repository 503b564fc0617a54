import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
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
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 43b: a GraphQL object field with a `defaultValue` (Nest code-first) answers
 * the default at the first call and null on every replay.
 *
 * The app (Apollo on Express, the docs' GraphQL setup, the pool seam): an `Account` object
 * type whose `currency` field is declared `@Field({ defaultValue: 'EUR' })`, the ordinary
 * code-first way to give a field a value when the source has none (Nest's field resolver
 * answers `field.options.defaultValue` when the parent's property is `undefined`:
 * @nestjs/graphql object-type-definition.factory.js, `createFieldResolver`). A class that is
 * both `@ObjectType()` and `@InputType()` (Nest's docs show it) carries such defaults as a
 * matter of course. `openAccount(owner)` inserts a row and returns it as the database gives
 * it, `{ id, owner }` with no `currency` column (`@Idempotent()` on the mutation).
 *
 * What happens: to store the answer, `outputWire` walks the selected fields
 * (lib/graphql/wire-value.ts:219-224): a selected field that the value does not have is stored
 * as `null` ("Selected and absent: the first answer is null (or the app's resolver's), and so
 * is a replay's"). But Nest's resolver of the field is not the app's `@ResolveField()` (so
 * `isResolvedByApp` is false), and it does not answer null for an absent property: it answers
 * the field's `defaultValue`. The first answer is `"currency":"EUR"`; the stored value has
 * `currency: null`, which `fromWire` (wire-value.ts:437-441) gives back as a present `null`, so
 * Nest's resolver answers null on every replay (`null` is not `undefined`). A non-null field
 * (`currency: String!` with a default) fails worse: the replay is a "Cannot return null for
 * non-nullable field" error, and the mutation's answer `data: null`.
 *
 * Expected: the replay is the first answer's bytes (but for the replay marker):
 * `{ id, owner, currency: "EUR" }`, one row.
 *
 * Control: the same mutation whose value carries `currency` itself (`{ ..., currency: 'EUR' }`):
 * stored and replayed as it was. Passes.
 *
 * Severity: critical (a wrong answer stored: the replay differs from the first answer, and a
 * non-null field with a default turns every retry into an error while the work was done).
 */
let pool: Pool;

@ObjectType()
class Account {
  @Field(() => Int)
  id!: number;

  @Field()
  owner!: string;

  @Field({ nullable: true, defaultValue: 'EUR' })
  currency?: string;

  @Field({ defaultValue: 'standard' })
  tier!: string;
}

@Resolver(() => Account)
class AccountsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Account)
  @Idempotent()
  async openAccount(
    @Args('owner') owner: string,
    @Args('withCurrency', { defaultValue: false }) withCurrency: boolean,
  ): Promise<Account> {
    const { rows } = await pool.query<{ id: number; owner: string }>(
      'INSERT INTO accounts (owner) VALUES ($1) RETURNING id, owner',
      [owner],
    );
    // The row as the database gives it; the control sets the defaults itself.
    return withCurrency ? { ...rows[0], currency: 'EUR', tier: 'standard' } : (rows[0] as Account);
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
  providers: [AccountsResolver],
})
class AccountsModule {}

describe('adversary 43b: an object field with a defaultValue, replayed', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv43b_default_value', {
      module: AccountsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE accounts (id serial PRIMARY KEY, owner text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const mutate = (key: string, owner: string, withCurrency: boolean) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(5_000)
      .send({
        query: `mutation { openAccount(owner: "${owner}", withCurrency: ${withCurrency}) { id owner currency tier } }`,
      });

  const rows = async (owner: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM accounts WHERE owner = $1', [owner])).rows[0]
        .count,
    );

  /** The answer without the replay marker. */
  const bare = (body: Record<string, unknown>) => {
    const { extensions: _extensions, ...rest } = body;
    return rest;
  };

  it.each([
    ['control: the value carries the default itself', true],
    ['the value has no currency: the field answers its defaultValue', false],
  ] as const)('%s: the replay is the first answer', async (_name, withCurrency) => {
    const owner = `adv43b-${withCurrency ? 'set' : 'default'}`;
    const first = await mutate(owner, owner, withCurrency);
    const replay = await mutate(owner, owner, withCurrency);
    expect(first.body).toEqual({
      data: { openAccount: { id: expect.any(Number), owner, currency: 'EUR', tier: 'standard' } },
    });
    // Received (no currency): { data: null, errors: [Cannot return null for non-nullable
    // field Account.tier] }; with `tier` unselected, currency: null.
    expect(bare(replay.body as Record<string, unknown>)).toEqual(first.body);
    expect((replay.body as { extensions?: unknown }).extensions).toEqual({
      idempotency: { replayed: ['openAccount'] },
    });
    expect(await rows(owner)).toBe(1);
  });

  it('the nullable field alone: the replay answers null where the first call answered EUR', async () => {
    const owner = 'adv43b-nullable';
    const send = () =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', owner)
        .timeout(5_000)
        .send({ query: `mutation { openAccount(owner: "${owner}") { id currency } }` });
    const first = await send();
    const replay = await send();
    expect(first.body.data).toEqual({ openAccount: { id: expect.any(Number), currency: 'EUR' } });
    // Received: { openAccount: { id, currency: null } }.
    expect(replay.body.data).toEqual(first.body.data);
    expect(await rows(owner)).toBe(1);
  });
});
