import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  GraphQLModule,
  Info,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { GraphQLError, type GraphQLResolveInfo } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 74: a resolver's `GraphQLError` that says where it is (its `nodes`: the argument
 * the client got wrong, so that its `locations` point at it; or its own `path`, as an error
 * passed on from a GraphQL call made inside the resolver has) is answered there the first
 * time, and at the mutation field on every replay: the retry's error has other `locations`
 * (and `path`) than the first answer's.
 *
 * The app: the docs' `createTransfer` (`Idempotency-Key` header), Apollo on Express, whose
 * resolver refuses an amount over the limit with graphql-js' own way of pointing at the
 * argument: `throw new GraphQLError('amount over the limit', { nodes: <the amount argument's
 * node>, extensions: { code: 'BAD_USER_INPUT' } })`.
 *
 * Why: `fieldError` (lib/graphql/field-answer.ts) stores a `GraphQLError`'s message and
 * extensions only, and `thrownError` (lib/graphql/thrown-error.ts) throws a new
 * `GraphQLError(message, { extensions })` on a replay: graphql-js then locates it at the
 * field (its node, its path), where at first `locatedError` kept the error's own `nodes`
 * (and its own `path`, for an error that had one: `isLocatedGraphQLError`).
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "the error is stored
 * alone and thrown again on every retry with its `message`, its `extensions` ... GraphQL
 * gives the replay the same `path` and `locations`"; "The answers are the same bytes when the
 * operation is, but for the replay marker".
 *
 * Control: the same refusal thrown without `nodes` (`new GraphQLError(message, { extensions
 * })`): the replay is the first answer but for the marker; passes.
 *
 * Severity: low (a replay's error points elsewhere than the first answer's: a client that
 * shows the error at its location, or matches errors by path, sees another answer).
 *
 * Suggested fix: store a `GraphQLError`'s own `locations` and `path` when it has them (what
 * `locatedError` keeps), and throw the replay's error with them (its `locations` given as
 * the first answer's, its `path` as its own).
 *
 * Fixed: `fieldError` (field-answer.ts, `keepOwnPlace`) stores a `GraphQLError`'s own
 * `locations` and `path`; `thrownError` (`graphqlErrorAgain`) throws the replay's error with
 * that `path`, and a `source` and `positions` (`sourceAt`, error-location.ts: spaces only)
 * from which graphql-js computes the first answer's `locations` again.
 */
let pool: Pool;

@ObjectType()
class Transfer {
  @Field(() => Int)
  id!: number;
}

const LIMIT = 1000;

@Resolver(() => Transfer)
class TransfersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Transfer)
  @Idempotent()
  async createTransfer(
    @Args('to') to: string,
    @Args('amount', { type: () => Int }) amount: number,
    @Info() info: GraphQLResolveInfo,
  ): Promise<Transfer> {
    if (amount > LIMIT) {
      // Pointed at the argument the client got wrong.
      const argument = info.fieldNodes[0].arguments?.find((node) => node.name.value === 'amount');
      throw new GraphQLError('amount over the limit', {
        nodes: argument,
        extensions: { code: 'BAD_USER_INPUT' },
      });
    }
    const { rows } = await pool.query<Transfer>(
      'INSERT INTO transfers (amount) VALUES ($1) RETURNING id',
      [amount],
    );
    return rows[0];
  }

  // The control: the same refusal, not pointed anywhere.
  @Mutation(() => Transfer)
  @Idempotent()
  async createPlainTransfer(
    @Args('to') to: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<Transfer> {
    if (amount > LIMIT) {
      throw new GraphQLError('amount over the limit', { extensions: { code: 'BAD_USER_INPUT' } });
    }
    const { rows } = await pool.query<Transfer>(
      'INSERT INTO transfers (amount) VALUES ($1) RETURNING id',
      [amount],
    );
    return rows[0];
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

describe("adversary 74: a GraphQLError's own locations, replayed", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv74_gql_error_location', {
      module: TransfersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, amount int NOT NULL)');
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

  const replayOf = (first: { body: Record<string, unknown> }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  it('control: the refusal not pointed anywhere replays as it was first answered', async () => {
    const query = 'mutation { createPlainTransfer(to: "acct_1", amount: 5000) { id } }';
    const first = await post('adv74-located-c', query);
    expect(first.body.errors[0]).toMatchObject({
      message: 'amount over the limit',
      path: ['createPlainTransfer'],
    });
    const again = await post('adv74-located-c', query);
    expect(again.body).toEqual(replayOf(first, 'createPlainTransfer'));
  });

  it('the refusal pointed at its argument replays as it was first answered', async () => {
    const query = 'mutation { createTransfer(to: "acct_1", amount: 5000) { id } }';
    const first = await post('adv74-located-a', query);
    // At the argument: line 1, column 41 (`amount: 5000`).
    expect(first.body.errors[0]).toMatchObject({
      message: 'amount over the limit',
      locations: [{ line: 1, column: 41 }],
      path: ['createTransfer'],
    });
    const again = await post('adv74-located-a', query);
    // Fails: the replay's locations are the field's (column 12), not the argument's.
    expect(again.body).toEqual(replayOf(first, 'createTransfer'));
  });
});
