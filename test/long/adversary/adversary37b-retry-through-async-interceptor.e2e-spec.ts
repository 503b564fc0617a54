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
import { GraphQLError } from 'graphql';
import { type Pool } from 'pg';
import { type Observable, retry } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 37b: the app's retry of a field (rxjs `retry(1)`, at once) is told the first try's
 * error, and never runs, when an app interceptor between the retry and `@Idempotent()` awaits
 * I/O before it hands on.
 *
 * App: Apollo (Express) and Mercurius (Fastify); `@Idempotent()` on `pay` (key in the
 * `Idempotency-Key` header), whose payment gateway declines the first try (a flaky provider)
 * and accepts the second. Two global interceptors: the first retries at once
 * (`next.handle().pipe(retry(1))`, the docs' own example of a retry that runs the resolver
 * again); the second is an ordinary `async intercept()` that reads the database before it
 * returns `next.handle()` (a tenant's status, a feature flag, a rate limit in Postgres).
 * What happens: Nest's `next.handle()` is deferred, so the retry's new subscription runs the
 * second interceptor's `intercept()` again, and its query is I/O: the library's interceptor
 * is reached after a `setImmediate`. By then the first run's `delivering` is cleared
 * (lib/graphql/intercept-field.ts:100-101), so `laterRunStep` takes the retry for "an audit
 * that subscribed late" (lib/graphql/field-runs.ts:106) and joins it to the failed try
 * (intercept-field.ts:57-73): the resolver does not run again, the first try's decline is
 * stored as the key's answer, and every retry of the client replays the decline.
 * Expected: as the docs say (docs/guides/graphql.md, "An interceptor of the app's that runs
 * the field's chain more than once"): a retry at once runs the resolver again, the failed
 * try's effects rolled back and its error never stored; the second try's payment is the
 * key's answer, once.
 * Control: the same app whose inner interceptor hands on at once (no query): the retry runs,
 * the payment is made once and replayed.
 * Severity: medium (no double effect and no answer that differs from the stored one, but the
 * app's retry silently stops retrying, and the key is bound for ever to a decline the app
 * meant to retry past).
 */
let pool: Pool;
/** Whether the app's inner interceptor reads the database before it hands on. */
let readsFirst = false;
const calls: Record<string, number> = {};

/** The app's retry of a flaky call: rxjs retry(1), at once. */
@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry(1));
  }
}

/** An app interceptor that reads the database before handing on (a tenant's status, say). */
@Injectable()
class TenantCheckInterceptor implements NestInterceptor {
  async intercept(_context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    if (readsFirst) await pool.query('SELECT 1');
    return next.handle();
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

  /** The provider declines the first try (a flaky gateway); the second goes through. */
  @Mutation(() => Payment, { nullable: true })
  @Idempotent()
  async pay(@Args('ref') ref: string): Promise<Payment> {
    calls[ref] = (calls[ref] ?? 0) + 1;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    if (calls[ref] === 1)
      throw new GraphQLError('gateway declined', { extensions: { code: 'DECLINED' } });
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

describe.each(GRAPHQL_DRIVERS)(
  'adversary 37b: retry through an async interceptor, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [
          PaymentsResolver,
          { provide: APP_INTERCEPTOR, useClass: RetryInterceptor },
          { provide: APP_INTERCEPTOR, useClass: TenantCheckInterceptor },
        ],
      })
      class PaymentsModule {}
      fixture = await startPoolApp(`adv37b_asyncretry_${driver}`, {
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

    const send = async (ref: string) => {
      const answer = await request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', ref)
        .timeout(10_000)
        .send({ query: `mutation { pay(ref: "${ref}") { ref } }` });
      const body = answer.body as {
        data?: { pay?: unknown } | null;
        errors?: { message: string; extensions?: { code?: unknown } }[];
      };
      return body.data?.pay ?? body.errors?.[0]?.extensions?.code ?? body.errors?.[0]?.message;
    };

    async function run(ref: string, reads: boolean) {
      readsFirst = reads;
      const first = await send(ref);
      const again = await send(ref);
      readsFirst = false;
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
        [ref],
      );
      return { first, again, ran: calls[ref] ?? 0, kept: (rows.rows[0] as { n: number }).n };
    }

    const paid = (ref: string) => ({ first: { ref }, again: { ref }, ran: 2, kept: 1 });

    it('control: the inner interceptor hands on at once: the retry runs, the payment once', async () => {
      expect(await run(`${driver}-at-once`, false)).toEqual(paid(`${driver}-at-once`));
    });

    it('the inner interceptor reads the database first: the retry must run the payment', async () => {
      expect(await run(`${driver}-reads-first`, true)).toEqual(paid(`${driver}-reads-first`));
    });
  },
);
