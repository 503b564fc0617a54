import { jest } from '@jest/globals';
import {
  BadRequestException,
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import { type Observable, retry } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 34: the app's `retry()` (the interceptor the GraphQL field runs now support) around
 * a field whose stored answer is an error: each replay run marks the field replayed again, so
 * the retry's answer says `extensions.idempotency.replayed: ["pay", "pay"]`, and the first
 * and the replay differ by more than the marker the docs describe.
 *
 * App: Apollo (Express) and Mercurius (Fastify); a global interceptor
 * `next.handle().pipe(retry(1))`; `@Idempotent()` on `pay`, which declines
 * (BadRequestException: a final error, stored as the answer goes out).
 * What happens: the first call runs the resolver twice (the retry takes the failed try's
 * claim over: lib/graphql/intercept-field.ts:64-66) and the second error is stored. The retry
 * request replays it: `answer()` marks the field (intercept-field.ts:143) and throws the stored
 * error; the app's `retry()` runs the chain again, which replays again and marks it again
 * (lib/graphql/replay-marker.ts:21-25 pushes without looking: one entry per run, not per
 * field). The same with `retry({ count, delay })` whose delay outlasts storeWaitMs: the first
 * call's own answer is then marked `replayed: ["pay"]` (its retry replays the error the timer
 * stored), though docs/guides/graphql.md "Replays say so" lists a field "in the order they
 * ran", once, and "a field that ran" not at all.
 * Expected: `replayed: ["pay"]`, once per field of the answer.
 * Control: the same app without the retry: `replayed: ["pay"]`.
 * Severity: low (the marker is wrong: a client counting replayed fields, or comparing the
 * replay with the first answer beyond the marker, is misled; no effect runs twice).
 */
let pool: Pool;
let retrying = false;

@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return retrying ? next.handle().pipe(retry(1)) : next.handle();
  }
}

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
  @Idempotent()
  async pay(@Args('ref') ref: string): Promise<Payment> {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    throw new BadRequestException('card declined');
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
  'adversary 34: a replay under the app’s retry(), on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [PaymentsResolver, { provide: APP_INTERCEPTOR, useClass: RetryInterceptor }],
      })
      class PaymentsModule {}
      fixture = await startPoolApp(`adv34_marker_${driver}`, {
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

    /** The first call and its retry: their errors' messages and their replay markers. */
    async function twice(ref: string) {
      const send = async () => {
        const answer = await request(fixture.app.getHttpServer())
          .post('/graphql')
          .set('Idempotency-Key', ref)
          .timeout(10_000)
          .send({ query: `mutation { pay(ref: "${ref}") { ref } }` });
        const body = answer.body as {
          errors?: { message: string }[];
          extensions?: { idempotency?: unknown };
        };
        return {
          errors: body.errors?.map((error) => error.message),
          marker: body.extensions?.idempotency,
        };
      };
      return [await send(), await send()];
    }

    const expected = [
      { errors: ['card declined'], marker: undefined },
      { errors: ['card declined'], marker: { replayed: ['pay'] } },
    ];

    it('control: without the app’s retry, the replay is marked once', async () => {
      retrying = false;
      expect(await twice(`${driver}-once`)).toEqual(expected);
    });

    it('under the app’s retry(), the replay is marked once too', async () => {
      retrying = true;
      expect(await twice(`${driver}-retry`)).toEqual(expected);
    });
  },
);
