import { jest } from '@jest/globals';
import { BadRequestException, Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 34: an app whose error formatter leaves out `path` (a common masking formatter:
 * `formatError: (e) => ({ message: e.message, extensions: { code } })` on Apollo, a Mercurius
 * `errorFormatter` that maps each error to `{ message, extensions }`). A field error that cannot
 * be stored as the answer goes out is *added* next to the resolver's error, not put in its
 * place: the client is still given "card declined", an answer never stored, which its retry
 * does not get (nothing stored: the retry runs the resolver again).
 *
 * App: Apollo (Express) and Mercurius (Fastify), `@Idempotent()` on `pay` (header key),
 * `databaseTimeoutMs: 500`; `pay` declines (BadRequestException, a final error) while the keys'
 * table is unavailable (locked, as test/graphql-field-runs "store-down" does).
 * What happens: both drivers format errors before the library's hook sees them (Apollo
 * `formatError` before `willSendResponse`; Mercurius `maybeFormatErrors` runs `errorFormatter`
 * before `onResolution`). lib/graphql/replay-marker.ts:82 / :101 call
 * `withStoreFailures` (lib/graphql/stored-at-answer.ts:130-148), which finds the failed
 * field's entry by its `path` only (`samePath`, :150); with no path it pushes (:145)
 * `store_unavailable` and leaves the resolver's error in the answer.
 * Expected: the field's error replaced by `store_unavailable` (as the design says), e.g. the
 * entry matched by the field's error itself, or the errors rewritten before formatting.
 * Control: the same app with a formatter that keeps `path`: `store_unavailable` alone.
 * Severity: medium (an error the client got that was never stored and is not replayed; a
 * client reading the first error believes the card was declined, its retry pays).
 */
let pool: Pool;
let admin: Client;
let keepPath = true;

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

  @Mutation(() => Payment)
  @Idempotent()
  async pay(@Args('ref') ref: string) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    // The keys' table unavailable from now until the test releases it.
    await admin.query('BEGIN');
    await admin.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
    throw new BadRequestException('card declined');
  }
}

interface Entry {
  message: string;
  path?: readonly (string | number)[];
  extensions?: Record<string, unknown>;
}
/** The app's masking formatter: message and code, and `path` only in the control. */
const mask = (error: Entry): Entry => ({
  message: error.message,
  ...(keepPath && error.path ? { path: error.path } : {}),
  extensions: { code: error.extensions?.code },
});

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
        formatError: (formatted) => mask(formatted as Entry),
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
        errorFormatter: (execution) => ({
          statusCode: 200,
          response: {
            data: execution.data ?? null,
            errors: (execution.errors ?? []).map((error) => mask(error as unknown as Entry)),
          },
        }),
      });
}

describe.each(GRAPHQL_DRIVERS)('adversary 34: an error formatter without path, on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 500 }),
        }),
        graphqlModule(driver),
      ],
      providers: [PaymentsResolver],
    })
    class PaymentsModule {}
    fixture = await startPoolApp(`adv34_format_${driver}`, {
      module: PaymentsModule,
      adapter: driver === 'apollo' ? 'express' : 'fastify',
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
    admin = new Client({ connectionString: fixture.database.url });
    await admin.connect();
  }, 60_000);

  afterAll(async () => {
    await admin?.end();
    await fixture?.close();
  });

  async function firstAnswer(ref: string, withPath: boolean) {
    keepPath = withPath;
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', ref)
      .timeout(10_000)
      .send({ query: `mutation { pay(ref: "${ref}") { ref } }` });
    await admin.query('ROLLBACK');
    const errors = (answer.body as { errors?: Entry[] }).errors ?? [];
    return errors.map((error) =>
      error.extensions?.code === 'store_unavailable' ? 'store_unavailable' : error.message,
    );
  }

  it('control: a formatter that keeps path: store_unavailable in place of the error', async () => {
    expect(await firstAnswer(`${driver}-with-path`, true)).toEqual(['store_unavailable']);
  }, 20_000);

  it('a formatter without path: the resolver’s unstored error must not reach the client', async () => {
    expect(await firstAnswer(`${driver}-without-path`, false)).toEqual(['store_unavailable']);
  }, 20_000);
});
