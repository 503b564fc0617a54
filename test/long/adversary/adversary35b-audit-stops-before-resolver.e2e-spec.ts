import { jest } from '@jest/globals';
import {
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  type PipeTransform,
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
 * Adversary 35b: round 34's fix (a side audit that stops watching leaves the returned run to
 * answer what the resolver comes to) holds once the resolver started, not before: an audit
 * that stops while a pipe still runs makes the client's own call answer `key_in_progress`.
 *
 * App: Apollo (Express) and Mercurius (Fastify); a global interceptor that subscribes to
 * `next.handle()` on the side with `takeUntil(timer(50))` (an audit with a time limit), then
 * returns it; `@Idempotent()` on `pay`, whose argument goes through an async pipe that takes
 * 150 ms (a lookup), then pays.
 * What happens: the side run owns the key; the returned run joins it
 * (lib/graphql/intercept-field.ts:54-63). At 50 ms, in the pipe, the side run is unsubscribed:
 * lib/graphql/run-field.ts:202-207 (never started) gives the key back with a
 * `void rollBackAndRelease(...)`, and sets no `detachedSettled`, so `tracked()`'s teardown
 * (intercept-field.ts:100-107) ends the run with `claimAgain` at once. The joined run claims
 * (intercept-field.ts:61) while the release is still in flight, meets the key `started` and
 * answers 409 `key_in_progress`; the resolver never runs for this call.
 * Expected: the returned run claims once the key is given back (or takes it over) and pays,
 * as when the audit stops after the resolver started (round 34's test) or watches to the end.
 * Control: the same audit watching to the end: the payment, once.
 * Severity: medium-low (the client's own first call is told "in progress, retry later" though
 * nothing else holds the key; nothing runs twice, the retry runs it).
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

/** A pipe that looks the reference up first (an async check): 150 ms. */
@Injectable()
class SlowCheckPipe implements PipeTransform<string, Promise<string>> {
  async transform(ref: string): Promise<string> {
    await new Promise((resolve) => setTimeout(resolve, 150));
    return ref;
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
  async pay(@Args('ref', SlowCheckPipe) ref: string): Promise<Payment> {
    calls[ref] = (calls[ref] ?? 0) + 1;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
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
  'adversary 35b: a side audit that stops before the resolver started, on %s',
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
      fixture = await startPoolApp(`adv35b_prestop_${driver}`, {
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

    it('the audit stops watching at 50 ms, in the pipe: the client must still get its payment', async () => {
      expect(await run(`${driver}-stops`, 50)).toEqual(paid(`${driver}-stops`));
    });
  },
);
