import { jest } from '@jest/globals';
import { Module, type Type } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, GraphQLModule, Mutation, Query, Resolver } from '@nestjs/graphql';
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
 * Adversary, round 71: the start-up check of `keyFrom: { arg }` in a SCHEMA-FIRST app
 * (`typeDefs`/`typePaths`, Nest's other documented mode), where the schema, not `@Args()`,
 * says which arguments a mutation has.
 *
 * (a) The SDL declares the key argument, the resolver does not take it as an `@Args()` (it
 *     has no use for it: `@Args('amount') amount` only). A valid app: the client sends
 *     `charge(idempotencyKey: "k", amount: 5)` and the library reads the key from the field's
 *     node. It is REFUSED at start-up ("names no argument of the mutation (its arguments:
 *     amount)"), a false refusal.
 * (b) The reverse: the resolver has `@Args('idempotencyKey')`, the SDL does not declare it.
 *     No client can send it (GraphQL refuses an unknown argument), so every call is refused
 *     with key_missing (with required: false, every call runs unkeyed). The app STARTS: the
 *     misconfiguration is found by the first client, not at start-up.
 *
 * Why: lib/routes/idempotent-routes.check.ts checks the key against Nest's `@Args()`
 * metadata (`argNamesOf`) whenever it names every argument, and against the built schema
 * (`onApplicationBootstrap`) only when it does not (an `@ArgsType()` class). In schema-first
 * the metadata is not the schema.
 *
 * Expected: the check reads the built schema's arguments: (a) starts and replays, (b) fails
 * at start-up. Severity: low-medium ((a) blocks a valid app, with a workaround; (b) a
 * misconfiguration shipped).
 *
 * Control (passes): SDL and @Args() both declare the key: starts, and a retry replays.
 *
 * Fixed: every keyed mutation's key argument is checked against the built schema at bootstrap
 * (`IdempotentRoutesCheck.onApplicationBootstrap`), never against `@Args()` metadata alone.
 */
let pool: Pool;
let runs = 0;

async function insert(amount: number): Promise<number> {
  runs += 1;
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO charges (amount) VALUES ($1) RETURNING id',
    [amount],
  );
  return rows[0].id;
}

/** (a) The key in the SDL only. */
@Resolver()
class SdlKeyResolver {
  @Query()
  ping(): number {
    return 1;
  }

  @Mutation()
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  charge(@Args('amount') amount: number): Promise<number> {
    return insert(amount);
  }
}

/** (b) The key in @Args() only. */
@Resolver()
class ArgsKeyResolver {
  @Query()
  ping(): number {
    return 1;
  }

  @Mutation()
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  charge(@Args('idempotencyKey') _key: string, @Args('amount') amount: number): Promise<number> {
    return insert(amount);
  }
}

const WITH_KEY = `
  type Query { ping: Int! }
  type Mutation { charge(idempotencyKey: String!, amount: Int!): Int! }
`;
const WITHOUT_KEY = `
  type Query { ping: Int! }
  type Mutation { charge(amount: Int!): Int! }
`;

function graphqlModule(driver: GraphqlDriverName, typeDefs: string) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, typeDefs })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        typeDefs,
        graphiql: false,
      });
}

async function start(
  name: string,
  driver: GraphqlDriverName,
  resolver: Type<unknown>,
  typeDefs: string,
): Promise<{ fixture?: PoolApp; error?: unknown }> {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
      graphqlModule(driver, typeDefs),
    ],
    providers: [resolver],
  })
  class ChargesModule {}
  try {
    const fixture = await startPoolApp(`adv71_schema_first_${name}_${driver}`, {
      module: ChargesModule,
      adapter: driver === 'apollo' ? 'express' : 'fastify',
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE charges (id serial PRIMARY KEY, amount int NOT NULL)');
      },
    });
    return { fixture };
  } catch (error) {
    return { error };
  }
}

const send = (fixture: PoolApp, query: string) =>
  request(fixture.app.getHttpServer()).post('/graphql').timeout(5_000).send({ query });

async function replays(fixture: PoolApp, key: string): Promise<void> {
  const before = runs;
  const query = `mutation { charge(idempotencyKey: "${key}", amount: 5) }`;
  const first = await send(fixture, query);
  expect(first.body.errors).toBeUndefined();
  const retry = await send(fixture, query);
  expect(retry.body).toEqual({
    ...first.body,
    extensions: { idempotency: { replayed: ['charge'] } },
  });
  expect(runs - before).toBe(1);
}

describe.each(GRAPHQL_DRIVERS)('adversary 71: schema-first key argument check, on %s', (driver) => {
  it('control: the key in the SDL and in @Args(): starts, a retry replays', async () => {
    const { fixture, error } = await start('control', driver, ArgsKeyResolver, WITH_KEY);
    try {
      expect(error).toBeUndefined();
      await replays(fixture!, `c-${driver}`);
    } finally {
      await fixture?.close();
    }
  }, 60_000);

  it('(a) the key in the SDL, not in @Args(): a valid app starts, and a retry replays', async () => {
    const { fixture, error } = await start('sdl_key', driver, SdlKeyResolver, WITH_KEY);
    try {
      // Observed: InvalidIdempotencyOptionsError "... names no argument of the mutation (its
      // arguments: amount) ...".
      expect(error).toBeUndefined();
      await replays(fixture!, `a-${driver}`);
    } finally {
      await fixture?.close();
    }
  }, 60_000);

  it('(b) the key in @Args(), not in the SDL: refused at start-up', async () => {
    const { fixture, error } = await start('args_key', driver, ArgsKeyResolver, WITHOUT_KEY);
    try {
      // Observed: starts; every call is key_missing, the argument cannot be sent.
      const call = fixture ? await send(fixture, 'mutation { charge(amount: 5) }') : undefined;
      expect({ started: fixture !== undefined, errors: call?.body.errors }).toEqual({
        started: false,
        errors: undefined,
      });
      expect(String(error)).toMatch(/idempotencyKey/);
    } finally {
      await fixture?.close();
    }
  }, 60_000);
});
