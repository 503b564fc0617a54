import { jest } from '@jest/globals';
import { BadRequestException, Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
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
 * Adversary 35b: one operation that calls a mutation twice under aliases with the same key
 * (a key in an argument: "it names its call, wherever it appears", docs/guides/graphql.md
 * "One record per mutation field"). When the first call succeeds, the second replays it; when
 * it fails, the second is answered `key_in_progress`, by the operation's own first call, and
 * a retry of the operation then answers it the error.
 *
 * App: Apollo (Express) and Mercurius (Fastify); `@Idempotent({ keyFrom: { arg: 'ref' } })`
 * on `pay` (nullable; inserts; declines with a BadRequestException when `decline` is set).
 * Operation: `mutation { a: pay(ref: "k", ...) { ref } b: pay(ref: "k", ...) { ref } }`.
 * What happens: `a` fails; lib/graphql/run-field.ts `failed()` (:265-281) rolls its work
 * back but keeps its claim `started`, the error waiting for the operation's answer
 * (lib/graphql/stored-at-answer.ts:80-93). `b` runs next (serially), claims the same key
 * (lib/graphql/intercept-field.ts `fieldSteps` -> claimOrDecide) and meets `a`'s hold: 409
 * `key_in_progress`. The answer goes out: `a` "card declined", `b` "still being processed",
 * and then `a`'s error is stored. The retry of the same operation answers `b` "card declined".
 * Before errors were stored at the answer, `b` replayed the error, as it replays a value.
 * Expected: `b` answers what the key's answer is ("card declined"), as it replays `a`'s
 * payment in the control; the client's answer is the one its retry gets.
 * Control: `a` succeeds: `b` replays the payment, and the retry gives both again.
 * Severity: low (the client is told to retry a call whose answer is decided; nothing runs
 * twice, nothing is kept).
 */
let pool: Pool;
const calls: Record<string, number> = {};

@ObjectType()
class Payment {
  @Field()
  ref!: string;
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Payment, { nullable: true })
  @Idempotent({ keyFrom: { arg: 'ref' } })
  async pay(@Args('ref') ref: string, @Args('decline') decline: boolean): Promise<Payment> {
    calls[ref] = (calls[ref] ?? 0) + 1;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    if (decline) throw new BadRequestException('card declined');
    return { ref };
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

describe.each(GRAPHQL_DRIVERS)('adversary 35b: one key twice in one operation, on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [PaymentsResolver],
    })
    class PaymentsModule {}
    fixture = await startPoolApp(`adv35b_alias_${driver}`, {
      module: PaymentsModule,
      adapter: driver === 'apollo' ? 'express' : 'fastify',
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = async (ref: string, decline: boolean) => {
    const call = `pay(ref: "${ref}", decline: ${decline}) { ref }`;
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .timeout(10_000)
      .send({ query: `mutation { a: ${call} b: ${call} }` });
    const body = answer.body as {
      data?: Record<string, unknown> | null;
      errors?: { message: string; path?: unknown[] }[];
    };
    const of = (alias: string) =>
      body.data?.[alias] ?? body.errors?.find((error) => error.path?.[0] === alias)?.message;
    return { a: of('a'), b: of('b') };
  };

  async function run(ref: string, decline: boolean) {
    const first = await send(ref, decline);
    const retried = await send(ref, decline);
    return { first, retried, ran: calls[ref] };
  }

  it('control: the first call pays: the second replays it, and so does the retry', async () => {
    const ref = `${driver}-paid`;
    const both = { a: { ref }, b: { ref } };
    expect(await run(ref, false)).toEqual({ first: both, retried: both, ran: 1 });
  });

  it('the first call declines: the second must answer the stored error, not key_in_progress', async () => {
    const both = { a: 'card declined', b: 'card declined' };
    expect(await run(`${driver}-declined`, true)).toEqual({ first: both, retried: both, ran: 1 });
  });
});
