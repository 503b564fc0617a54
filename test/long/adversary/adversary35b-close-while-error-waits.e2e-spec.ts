import { jest } from '@jest/globals';
import {
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
import { type Observable, timeout } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';
import { endTestPool } from '../../support/test-pool.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 35b: under an outer timeout, a resolver that fails after the timeout answered
 * leaves its error waiting for an answer that already went out; `app.close()` returns
 * meanwhile, and the process that exits then leaves the key `started`, its error never stored.
 *
 * App: Apollo (Express) and Mercurius (Fastify); a global `timeout(100)` interceptor (the usual
 * Nest one); `@Idempotent({ leaseMs: 6000 })` on `pay` (storeWaitMs 2000), which inserts,
 * takes 300 ms and throws "ledger closed" (a final error). A rolling deploy: the app is closed
 * once the resolver ended, then its pool (the process exits).
 * What happens:
 *  - the timeout answers the client at 100 ms; the resolver goes on detached
 *    (lib/graphql/run-field.ts:193-201), and fails at 300 ms: `failed()` (:265-281) parks the
 *    error in a PendingAnswer (lib/graphql/stored-at-answer.ts:80-93) on the operation's
 *    context, whose answer went out already (replay-marker.ts:79 / :99 ran, with nothing
 *    pending): only the fallback timer (stored-at-answer.ts:41-42, unref'd) will store it,
 *    storeWaitMs later. Nothing waits for it on shutdown.
 *  - `app.close()` returns while it waits; the pool ends; the timer's store fails. The key
 *    stays `started`: every retry gets 409 `key_in_progress` until the lease is over (as the
 *    docs promise "app.close() returns once it is done", docs/guides/graphql.md:462-465).
 * Expected: as for a value (the control): once the resolver is done, its answer (here its
 * error) is stored before `app.close()` returns, as the docs say of a timed-out resolver.
 * Control: the same resolver returning its value: `done` after `app.close()`.
 * Severity: low (a key left `started` for a lease after a graceful shutdown; the retry after
 * the lease runs the resolver again, nothing of the failed try kept; the client had only
 * been told "timeout").
 */
let pool: Pool;
let failing = true;
let ended = 0;

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout(100));
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
  @Idempotent({ leaseMs: 6000 })
  async pay(@Args('ref') ref: string): Promise<Payment> {
    try {
      await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
      await new Promise((resolve) => setTimeout(resolve, 300));
      if (failing) throw new Error('ledger closed');
      return { ref };
    } finally {
      ended++;
    }
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
  'adversary 35b: app.close() while an error waits, on %s',
  (driver) => {
    async function closeAfterTimeout(ref: string, fail: boolean) {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [PaymentsResolver, { provide: APP_INTERCEPTOR, useClass: TimeoutInterceptor }],
      })
      class PaymentsModule {}
      const fixture: PoolApp = await startPoolApp(`adv35b_close_${driver}_${fail ? 'f' : 'ok'}`, {
        module: PaymentsModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
      try {
        failing = fail;
        ended = 0;
        const answer = await request(fixture.app.getHttpServer())
          .post('/graphql')
          .set('Idempotency-Key', ref)
          .timeout(10_000)
          .send({ query: `mutation { pay(ref: "${ref}") { ref } }` });
        const told = (answer.body as { errors?: { message: string }[] }).errors?.[0]?.message;
        // The resolver is done (as the library's own app.close() test waits for it).
        while (ended === 0) await new Promise((resolve) => setTimeout(resolve, 20));
        await new Promise((resolve) => setTimeout(resolve, 100));
        await fixture.app.close();
        // The process exits: its pool ends (the fallback timer, unref'd, would not keep it up).
        await endTestPool(fixture.pool);
        await new Promise((resolve) => setTimeout(resolve, 2500));
        const rows = await fixture.admin.query<{ state: string }>(
          'SELECT state FROM idempotency_keys WHERE key LIKE $1',
          [`${ref}%`],
        );
        return { told, state: rows.rows[0]?.state };
      } finally {
        await fixture.admin.end().catch(() => undefined);
        await fixture.database.drop();
      }
    }

    it('control: the resolver returns after the timeout: done when app.close() returns', async () => {
      expect(await closeAfterTimeout(`${driver}-ok`, false)).toEqual({
        told: 'Timeout has occurred',
        state: 'done',
      });
    }, 30_000);

    it('the resolver fails after the timeout: its error must be stored when app.close() returns', async () => {
      expect(await closeAfterTimeout(`${driver}-fails`, true)).toEqual({
        told: 'Timeout has occurred',
        state: 'done',
      });
    }, 30_000);
  },
);
