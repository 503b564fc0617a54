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
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import { type Observable, takeUntil, timer } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 34: an audit on the side that stops watching before the resolver settled
 * (`result$.pipe(takeUntil(timer(50))).subscribe()`: an audit with a time limit, or one that
 * stops when the request closes) makes the client's own call answer `key_in_progress`,
 * though its resolver runs and pays. Round 32 fixed this on routes (a side subscription that
 * stops watching does not detach the run beside it); a field's runs still do.
 *
 * App: Apollo (Express) and Mercurius (Fastify); a global interceptor that subscribes to
 * `next.handle()` on the side, then returns it; `@Idempotent()` on `pay`, which takes 200 ms
 * and pays.
 * What happens: the side subscription is the field's first run and owns the key; the
 * returned run joins it (lib/graphql/intercept-field.ts:54-62). At 50 ms the side run is
 * unsubscribed: lib/graphql/run-field.ts (the teardown) detaches the resolver, which goes on
 * and commits, and `tracked()` (intercept-field.ts:77-98, its teardown) ends the run with `claimAgain`. The
 * joined run then claims the key as a new request would (intercept-field.ts:61 `claimed()`),
 * meets its own resolver's hold and answers 409 `key_in_progress`.
 * Expected: the returned run answers what the resolver comes to (its payment), as when the
 * audit watches to the end, and as a route does since round 32.
 * Control: the same audit watching to the end: the payment, once.
 * Severity: medium (the client's own first call is told "in progress, retry later" for a
 * payment that was made; nothing runs twice, the retry replays it).
 */
let pool: Pool;
let stopAfterMs: number | undefined;
const calls: Record<string, number> = {};

@Injectable()
class SideAuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    if (stopAfterMs === 0) result$.subscribe({ error: () => undefined });
    if (stopAfterMs) {
      result$.pipe(takeUntil(timer(stopAfterMs))).subscribe({ error: () => undefined });
    }
    return result$;
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
    calls[ref] = (calls[ref] ?? 0) + 1;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    await new Promise((resolve) => setTimeout(resolve, 200));
    return { ref };
  }

  @Mutation(() => Int)
  async slow(@Args('ms', { type: () => Int }) ms: number): Promise<number> {
    await new Promise((resolve) => setTimeout(resolve, ms));
    return ms;
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
  'adversary 34: a side audit that stops watching, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [PaymentsResolver, { provide: APP_INTERCEPTOR, useClass: SideAuditInterceptor }],
      })
      class PaymentsModule {}
      fixture = await startPoolApp(`adv34_stop_${driver}`, {
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
        errors?: { message: string }[];
      };
      return body.data?.pay ?? body.errors?.[0]?.message;
    };

    async function run(ref: string, delayMs: number) {
      stopAfterMs = delayMs;
      const first = await send(ref);
      stopAfterMs = undefined;
      await new Promise((resolve) => setTimeout(resolve, 200));
      const retried = await send(ref);
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
        [ref],
      );
      return { first, retried, ran: calls[ref], kept: (rows.rows[0] as { n: number }).n };
    }

    const paid = (ref: string) => ({ first: { ref }, retried: { ref }, ran: 1, kept: 1 });

    it('control: the audit watches to the end: the payment, once', async () => {
      expect(await run(`${driver}-to-the-end`, 0)).toEqual(paid(`${driver}-to-the-end`));
    });

    it('the audit stops watching at 50 ms: the client must still get its payment', async () => {
      expect(await run(`${driver}-stops`, 50)).toEqual(paid(`${driver}-stops`));
    });
  },
);
