import { jest } from '@jest/globals';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
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

jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 75: on Mercurius with `jit` (the docs' Fastify setup, `jit: 1`), a resolver's
 * `GraphQLError` that points at the argument the client got wrong (its `nodes`) is answered
 * there the first time and at the mutation field on the replay: the retry's error has other
 * `locations` than the first answer's. Round 74's fix of the same (adversary 74
 * error-own-location, Apollo only) does not hold under graphql-jit.
 *
 * The app: the docs' `createTransfer` (`Idempotency-Key` header), Mercurius on Fastify with
 * `jit: 1`, whose resolver refuses an amount over the limit with graphql-js' own way of
 * pointing at the argument:
 *
 *   const argument = info.fieldNodes[0].arguments?.find((n) => n.name.value === 'amount');
 *   throw new GraphQLError('amount over the limit', {
 *     nodes: argument, extensions: { code: 'BAD_USER_INPUT' } });
 *
 * Why: the first call of a document runs on graphql-js, whose `locatedError` keeps the
 * error's own locations (line 1, column 41). The replay is the document's second run, which
 * Mercurius runs compiled by graphql-jit, and graphql-jit wraps a resolver's error in its own
 * `GraphQLError` located at the field's nodes (`createErrorObject` in graphql-jit's
 * execution.js: `computeLocations(nodes)`), never at the thrown error's own. So the `source`
 * and `positions` that `graphqlErrorAgain` (lib/graphql/thrown-error.ts, with `sourceAt` of
 * lib/graphql/error-location.ts) gives the replay's error are not read there, and the replay
 * says column 12 (the field). The library already knows where the first answer located it
 * (the stored `locations`) and already rewrites the answer's errors in its Mercurius
 * `onResolution` hook (replay-marker.ts), but not these.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "GraphQL gives the
 * replay the same `path` and `locations`: at the field, or, for a `GraphQLError` made with its
 * own `nodes` (the argument it refuses) or its own `path` ..., at those, as the first answer
 * had them"; "The answers are the same bytes when the operation is, but for the replay
 * marker". No exception is stated for Mercurius' `jit`.
 *
 * Control: the same refusal thrown without `nodes`: the replay is the first answer but for
 * the marker; passes. And this file without `jit: 1` passes whole (checked): graphql-jit is
 * the trap.
 *
 * Severity: low (a replay's error points elsewhere than the first answer's: a client that
 * shows the error at its location sees another answer).
 *
 * Failed: `expect(again.body).toEqual(replayOf(first, 'createTransfer'))`: `locations`
 * `[{ line: 1, column: 12 }]` where the first answer had `[{ line: 1, column: 41 }]`.
 *
 * Suggested fix: in the Mercurius `onResolution` hook, give a replayed field's error the
 * stored `locations` (and `path`) back (the hook sees `execution.errors` before Mercurius
 * formats them); or state the limit under jit in graphql.md.
 *
 * Fixed: `graphqlErrorAgain` (lib/graphql/thrown-error.ts) notes a replay's error made with
 * the first answer's own locations (`noteOwnLocations`, new lib/graphql/jit-located.ts); the
 * replay's answer (`intercept-field.ts`, through `notingOwnLocated`) notes it on the
 * operation's context at the field's path; and the Mercurius `onResolution` hook
 * (`GraphqlReplayMarker`, lib/graphql/replay-marker.ts) gives that field's formatted entry the
 * first answer's `locations` back (`locatedAsFirst`, matched by path and message).
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
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      jit: 1,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [TransfersResolver],
})
class TransfersModule {}

describe("adversary 75: a GraphQLError's own locations, replayed under Mercurius' jit", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75_gql_jit_error_location', {
      adapter: 'fastify',
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
    const first = await post('adv75-jit-located-c', query);
    expect(first.body.errors[0]).toMatchObject({
      message: 'amount over the limit',
      path: ['createPlainTransfer'],
    });
    const again = await post('adv75-jit-located-c', query);
    expect(again.body).toEqual(replayOf(first, 'createPlainTransfer'));
  });

  it('the refusal pointed at its argument replays as it was first answered', async () => {
    const query = 'mutation { createTransfer(to: "acct_1", amount: 5000) { id } }';
    const first = await post('adv75-jit-located-a', query);
    // At the argument: line 1, column 41 (`amount: 5000`).
    expect(first.body.errors[0]).toMatchObject({
      message: 'amount over the limit',
      locations: [{ line: 1, column: 41 }],
      path: ['createTransfer'],
    });
    const again = await post('adv75-jit-located-a', query);
    // Failed: the replay's locations are the field's (column 12), not the argument's (41).
    expect(again.body).toEqual(replayOf(first, 'createTransfer'));
  });
});
