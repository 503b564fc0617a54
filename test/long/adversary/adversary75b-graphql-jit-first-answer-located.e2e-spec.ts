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
 * Adversary 75b: on Mercurius with `jit`, round 75's fix (f341e25) gives a replayed
 * `GraphQLError` its own `locations` back, also where the FIRST answer was itself run by
 * graphql-jit and so located at the field: the replay now points at the argument where the
 * first answer pointed at the field. Any key whose first call is not the document's first run
 * in the process (every key but one, on a busy server) replays other `locations` than its
 * first answer; before the fix both were at the field.
 *
 * The app: adversary 75 jit-error-location's (the docs' `createTransfer`, Mercurius `jit: 1`,
 * a `GraphQLError` made with `nodes` at the refused `amount` argument). A first client sends
 * the document under its key (graphql-js runs it: the error at column 41); a second client
 * sends the same document under another key: graphql-js' second run of it is graphql-jit's,
 * which answers the error at the field (column 12); its retry replays.
 *
 * Why: the stored `locations` are the thrown error's own (`ownErrorParts`, field-answer.ts),
 * read when the resolver threw, never the locations the first answer went out with.
 * `graphqlErrorAgain` (thrown-error.ts) notes them (`noteOwnLocations`), and the Mercurius
 * `onResolution` hook (`locatedAsFirst`, jit-located.ts, called from replay-marker.ts) writes
 * them over the replay's entry: column 41, where the first answer said 12.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "GraphQL gives the replay
 * the same `path` and `locations`"; "The answers are the same bytes when the operation is, but
 * for the replay marker".
 *
 * Control: the same flow with the refusal thrown without `nodes` (`createPlainTransfer`): the
 * second key's replay is its first answer; passes. (Adversary 75's own file, where the first
 * answer is the document's first run, passes too.)
 *
 * Severity: low (a replay's error points elsewhere than its first answer's).
 *
 * Fails now: the second key's replay has `locations` `[{ line: 1, column: 41 }]` where its first
 * answer had `[{ line: 1, column: 12 }]`.
 *
 * Suggested fix: store the locations the first answer went out with (read in the Mercurius
 * `onResolution` hook, where the answer's errors are, at the path of the field), not the
 * thrown error's own; or note, when the first answer is stored, whether the driver kept them.
 *
 * Fixed: a field's error is stored at the `locations` the operation's answer gave it
 * (`answeredLocations`, lib/graphql/error-location.ts, read by `storeAnswersOf` in
 * stored-at-answer.ts from the Mercurius `onResolution` and Apollo `willSendResponse` hooks,
 * replay-marker.ts; the stored answer re-encoded in run-field.ts' `store`), not the thrown
 * error's own.
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

describe("adversary 75b: a jit-run first answer's error locations, replayed under Mercurius' jit", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75b_gql_jit_first_located', {
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

  /** A first client's key, then a second client's first answer of the same document (jit). */
  const secondKey = async (field: string, query: string, tag: string) => {
    const warm = await post(`adv75b-jit-${tag}-1`, query);
    expect(warm.body.errors[0]).toMatchObject({ message: 'amount over the limit', path: [field] });
    const first = await post(`adv75b-jit-${tag}-2`, query);
    expect(first.body.errors[0]).toMatchObject({ message: 'amount over the limit', path: [field] });
    const again = await post(`adv75b-jit-${tag}-2`, query);
    return { first, again };
  };

  it('control: the refusal not pointed anywhere, a second key replays its first answer', async () => {
    const query = 'mutation { createPlainTransfer(to: "acct_2", amount: 5000) { id } }';
    const { first, again } = await secondKey('createPlainTransfer', query, 'c');
    expect(again.body).toEqual(replayOf(first, 'createPlainTransfer'));
  });

  it('the refusal pointed at its argument, a second key replays its first answer', async () => {
    const query = 'mutation { createTransfer(to: "acct_2", amount: 5000) { id } }';
    const { first, again } = await secondKey('createTransfer', query, 'a');
    // Fails: the replay is at the argument (column 41), its first answer at the field (12).
    expect(again.body).toEqual(replayOf(first, 'createTransfer'));
  });
});
