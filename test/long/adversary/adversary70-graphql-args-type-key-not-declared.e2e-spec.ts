import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import {
  Args,
  ArgsType,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  Query,
  Resolver,
} from '@nestjs/graphql';
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
 * Adversary, round 70: `keyFrom: { arg: 'idempotencyKey' }` naming an argument the mutation
 * does NOT have, where the mutation's arguments are an `@ArgsType()` class (`@Args() args:
 * ChargeArgs`, whose fields are `requestId` and `amount`). Round 69 made this misconfiguration
 * stop the start-up for `@Args('name')` parameters; with an `@ArgsType()` class it still
 * starts without a word, and with `required: false` every call runs unprotected: the client
 * sends its key in `requestId`, retries, and is charged twice.
 *
 * Why: lib/routes/idempotent-routes.check.ts `argNamesOf` returns undefined when any
 * `@Args()` has no property name (an `@ArgsType()` class), and route-problem.ts then skips the
 * check. The class's fields are known to @nestjs/graphql's TypeMetadataStorage once the schema
 * is built, and at each call in `info.parentType.getFields()[field].args`, so the run-time
 * reading could refuse it too; it reads the field as keyless.
 *
 * Expected (reference/start-up-checks.md; the promise "a misconfiguration fails at
 * start-up"): the start-up refuses it, as it does for `@Args('requestId')`.
 *
 * Control (passes): the key argument in the class, the retry replays.
 *
 * Severity: low-medium (a configuration mistake whose only symptom is the double effect).
 *
 * Fixed: a keyed mutation whose `@Args()` names are not all known is checked against the built
 * schema at bootstrap (`IdempotentRoutesCheck.onApplicationBootstrap`, `keyArgProblem`).
 */
let pool: Pool;
let runs = 0;

@ArgsType()
class ChargeArgs {
  @Field()
  requestId!: string;

  @Field(() => Int)
  amount!: number;
}

@ArgsType()
class KeyedArgs {
  @Field()
  idempotencyKey!: string;

  @Field(() => Int)
  amount!: number;
}

@Resolver()
class ChargesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async insert(amount: number): Promise<number> {
    runs++;
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO charges (amount) VALUES ($1) RETURNING id',
      [amount],
    );
    return rows[0].id;
  }

  /** The key read from `idempotencyKey`, which this mutation's class does not have. */
  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' }, required: false })
  charge(@Args() args: ChargeArgs): Promise<number> {
    return this.insert(args.amount);
  }

  /** Control: the argument in the class. */
  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' }, required: false })
  chargeDeclared(@Args() args: KeyedArgs): Promise<number> {
    return this.insert(args.amount);
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

describe.each(GRAPHQL_DRIVERS)(
  'adversary 70: keyFrom arg an @ArgsType() lacks, on %s',
  (driver) => {
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
        fixture = await startPoolApp(`adv70_argstype_key_${driver}`, {
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
  },
);
