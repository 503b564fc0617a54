import { jest } from '@jest/globals';
import {
  type ArgumentsHost,
  Catch,
  ConflictException,
  HttpException,
  Module,
} from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import {
  Args,
  Field,
  GraphQLModule,
  type GqlExceptionFilter,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { GraphQLError } from 'graphql';
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
 * Adversary 39b: a GraphQL exception filter that maps one of Nest's own HTTP exceptions
 * (`@Catch(ConflictException)`) to the API's error code answers the first call with the
 * API's error and every retry of the key with Nest's default rendering of a 409: the replay is
 * a plain `HttpException`, which the filter does not catch.
 *
 * App: Apollo (Express) and Mercurius (Fastify). `createTransfer(reference)` is
 * `@Idempotent()`; a reference already used by another transfer is refused with Nest's
 * `ConflictException('reference already used')` (its write rolled back: a final error, stored
 * and replayed, as graphql.md says). A global `GqlExceptionFilter` written as Nest's docs show
 * (`@Catch(ConflictException)`) maps it to the API's documented error:
 * `GraphQLError('This reference is already used', { extensions: { code:
 * 'DUPLICATE_REFERENCE' } })`, which the client's code switches on.
 * What happens: the first call throws the resolver's own `ConflictException`: the filter maps
 * it. The error is stored as `kind: 'http'` with its name, status and response
 * (lib/graphql/field-answer.ts:126-129); a replay rebuilds it as `new HttpException(response,
 * status)` (lib/graphql/thrown-error.ts:16-21), an instance of `HttpException` but not of
 * `ConflictException` (the stored `name` is only assigned): the filter does not catch it, and
 * the retry gets Nest's default rendering of the exception (message 'reference already
 * used'; on Apollo `code: 'INTERNAL_SERVER_ERROR'` with the response as `originalError`; on
 * Mercurius no extensions), not the API's `DUPLICATE_REFERENCE`. Every retry of the key, for
 * ever. graphql.md: "a filter that maps the app's own error classes should map them to one of
 * those" (GraphQLError, HttpException, Error): `ConflictException` is not the app's class, it
 * is Nest's, the one its docs' filters catch.
 * Expected: the retry's errors are the first answer's (byte for byte, but for the replay
 * marker).
 * Control: the same app whose filter is `@Catch(HttpException)` and checks `getStatus() ===
 * 409`: the replay is caught the same way, the same answer.
 * Severity: medium (no effect is doubled; every retry of the key gets another error than the
 * first answer, for ever: a client that retries after a lost answer misreads the refusal).
 */
let pool: Pool;
const apiError = () =>
  new GraphQLError('This reference is already used', {
    extensions: { code: 'DUPLICATE_REFERENCE' },
  });

/** The API's error mapping, catching Nest's own 409. */
@Catch(ConflictException)
class ConflictFilter implements GqlExceptionFilter {
  catch(_exception: ConflictException, _host: ArgumentsHost) {
    return apiError();
  }
}

/** The same mapping by status (the control). */
@Catch(HttpException)
class StatusFilter implements GqlExceptionFilter {
  catch(exception: HttpException, _host: ArgumentsHost) {
    return exception.getStatus() === 409 ? apiError() : exception;
  }
}

@ObjectType()
class Transfer {
  @Field()
  reference!: string;
}

@Resolver(() => Transfer)
class TransfersResolver {
  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Transfer, { nullable: true })
  @Idempotent()
  async createTransfer(@Args('reference') reference: string): Promise<Transfer> {
    const used = await pool.query('SELECT 1 FROM transfers WHERE reference = $1', [reference]);
    if (used.rowCount) throw new ConflictException('reference already used');
    await pool.query('INSERT INTO transfers (reference) VALUES ($1)', [reference]);
    return { reference };
  }
}

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
        includeStacktraceInErrorResponses: false,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
      });
}

describe.each(GRAPHQL_DRIVERS)(
  'adversary 39b: a filter of a Nest exception subclass, on a replay, on %s',
  (driver) => {
    describe.each(['ConflictException', 'HttpException by status (control)'] as const)(
      'the filter catches %s',
      (caught) => {
        let fixture: PoolApp;

        beforeAll(async () => {
          @Module({
            imports: [
              IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
              graphqlModule(driver),
            ],
            providers: [
              TransfersResolver,
              {
                provide: APP_FILTER,
                useClass: caught === 'ConflictException' ? ConflictFilter : StatusFilter,
              },
            ],
          })
          class TransfersModule {}
          const tag = caught === 'ConflictException' ? 'sub' : 'base';
          fixture = await startPoolApp(`adv39b_subclass_${tag}_${driver}`, {
            module: TransfersModule,
            adapter: driver === 'apollo' ? 'express' : 'fastify',
            max: 4,
            usePool: (started) => (pool = started),
            setup: async (owner) => {
              await owner.query(
                'CREATE TABLE transfers (id serial PRIMARY KEY, reference text NOT NULL)',
              );
            },
          });
        }, 60_000);

        afterAll(async () => {
          await fixture?.close();
        });

        const send = async (key: string, reference: string) => {
          const answer = await request(fixture.app.getHttpServer())
            .post('/graphql')
            .set('Idempotency-Key', key)
            .timeout(10_000)
            .send({
              query: `mutation { createTransfer(reference: "${reference}") { reference } }`,
            });
          const body = answer.body as { extensions?: Record<string, unknown> };
          // The replay marker is the one documented difference.
          delete body.extensions;
          return { status: answer.status, body: body as unknown };
        };

        it('the retry of a refused transfer gets the first answer again', async () => {
          const made = await send(`${driver}-${caught.split(' ')[0]}-first`, 'ref-1');
          expect(made.body).toEqual({ data: { createTransfer: { reference: 'ref-1' } } });
          // Another key, the same reference: refused, mapped by the filter.
          const first = await send(`${driver}-${caught.split(' ')[0]}-dup`, 'ref-1');
          expect(first.body).toMatchObject({
            errors: [{ message: 'This reference is already used' }],
          });
          const retried = await send(`${driver}-${caught.split(' ')[0]}-dup`, 'ref-1');
          expect(retried).toEqual(first);
        });
      },
    );
  },
);
