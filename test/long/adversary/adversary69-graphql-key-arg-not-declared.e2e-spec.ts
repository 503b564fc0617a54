import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, GraphQLModule, Int, Mutation, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 69: `keyFrom: { arg: 'idempotencyKey' }` naming an argument the mutation
 * does NOT declare (a typo, a rename of `@Args('requestId')`, or the class's
 * `@Idempotent({ keyFrom: { arg } })` over a mutation added later without it) starts up
 * without a word. With `required: false` the mutation then runs unprotected, every call, with
 * no error and no log line: the client sends its key in the argument the schema does have
 * (`requestId`), retries, and is charged twice. (With `required` left on, every call is
 * refused with "The idempotencyKey argument is required on this mutation", an argument the
 * client cannot send: GraphQL refuses an unknown argument.)
 *
 * Why: the start-up check (lib/routes/idempotent-routes.check.ts, route-problem.ts) looks at
 * `keyFrom: { arg }` only to refuse it on an HTTP route; at run time
 * (lib/graphql/read-field.ts) `field.args[arg]` is simply undefined, so the field reads as
 * keyless. The argument names of a resolver are known at start-up (`@Args()` metadata) and at
 * each call (`info.parentType.getFields()[field].args`).
 *
 * Expected (docs/guides/graphql.md, "Where it cannot go"; reference/start-up-checks.md): a
 * misplaced `@Idempotent()` "stops the start-up with a message that says why"; a key source
 * that can never be read is such a misplacement (or, at the least, each call's answer says
 * the mutation has no such argument, never a silent run without a key).
 *
 * Control (passes): the argument declared, the retry replays (one run).
 *
 * Severity: low-medium (a configuration mistake, but one whose only symptom is the double
 * effect the library exists to prevent).
 *
 * Fixed: the start-up check refuses a `keyFrom: { arg }` the resolver does not declare with
 * `@Args('name')` (`routeProblem`, `argNamesOf`), naming the arguments it has.
 */
let pool: Pool;
let runs = 0;

@Resolver()
class ChargesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  /** The key read from `idempotencyKey`, which this mutation does not have. */
  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' }, required: false })
  async charge(
    @Args('requestId') _requestId: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<number> {
    runs++;
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO charges (amount) VALUES ($1) RETURNING id',
      [amount],
    );
    return rows[0].id;
  }

  /** Control: the argument declared. */
  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' }, required: false })
  async chargeDeclared(
    @Args('idempotencyKey') _idempotencyKey: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<number> {
    runs++;
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO charges (amount) VALUES ($1) RETURNING id',
      [amount],
    );
    return rows[0].id;
  }
}

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
      });
}

describe.each(GRAPHQL_DRIVERS)('adversary 69: keyFrom arg the mutation lacks, on %s', (driver) => {
  let fixture: PoolApp | undefined;
  let startError: unknown;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [ChargesResolver],
    })
    class ChargesModule {}
    try {
      fixture = await startPoolApp(`adv69_key_arg_${driver}`, {
        module: ChargesModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE charges (id serial PRIMARY KEY, amount int NOT NULL)');
        },
      });
    } catch (error) {
      startError = error;
    }
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (query: string) =>
    request(fixture!.app.getHttpServer()).post('/graphql').timeout(5_000).send({ query });

  it('the start-up refuses a key argument the mutation does not declare', () => {
    // Observed: the app starts (startError undefined).
    expect(String(startError)).toMatch(/idempotencyKey/);
  });

  it('or else: a retry with the same request id is never run twice silently', async () => {
    if (!fixture) return;
    const amount = driver === 'apollo' ? 11 : 21;
    const before = runs;
    const query = `mutation { charge(requestId: "req-${driver}", amount: ${amount}) }`;
    const first = await send(query);
    const retry = await send(query);
    expect(first.body.errors).toBeUndefined();
    // Observed: two runs, two rows, no error, no replay marker.
    expect({ runs: runs - before, retry: retry.body.errors?.length ?? 0 }).not.toEqual({
      runs: 2,
      retry: 0,
    });
  });

  it('control: the argument declared, the retry replays', async () => {
    if (!fixture) return;
    const amount = driver === 'apollo' ? 12 : 22;
    const before = runs;
    const query = `mutation { chargeDeclared(idempotencyKey: "k-${driver}", amount: ${amount}) }`;
    const first = await send(query);
    const retry = await send(query);
    expect(retry.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['chargeDeclared'] } },
    });
    expect(runs - before).toBe(1);
  });
});
