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
import { catchError, type Observable, takeUntil, timeout, timer } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 35b: round 34's `detachedSettled` fix covers a detached resolver that succeeds,
 * not one that fails. The client's own call is answered `key_in_progress`, and the
 * resolver's error (which the client never got) is stored as the key's answer.
 *
 * App: Apollo (Express) and Mercurius (Fastify); `@Idempotent()` on `pay` (inserts a payment,
 * takes 200 ms, then declines with a BadRequestException: a final error). A global interceptor
 * in one of two shapes the brief names:
 *  - `side`: an audit on the side that stops watching at 50 ms
 *    (`next.handle().pipe(takeUntil(timer(50))).subscribe()`), the returned run beside it;
 *  - `timeout`: `next.handle().pipe(timeout(50), catchError(() => next.handle()))`.
 * What happens:
 *  - the first run (side audit / the timed-out run) owns the key; at 50 ms it is unsubscribed:
 *    lib/graphql/run-field.ts:193-201 (teardown) detaches the resolver and sets
 *    `detachedSettled`; intercept-field.ts:100-107 ends the run with `claimAgain` once settled.
 *  - the other run joined it (intercept-field.ts:53-62). At 200 ms the resolver throws:
 *    run-field.ts:179 `end({error})` -> `failed()` (:265-281) parks the error in a
 *    PendingAnswer (stored at the operation's answer), rolls back, keeps the claim `started`,
 *    and sets `takeClaim` on the first run; `detachedDone` fires, the first run ends
 *    `claimAgain`.
 *  - the joined run gets `claimAgain` (intercept-field.ts:61) and calls `claimed()` without
 *    the waiting claim: claimOrDecide meets the key `started` by its own resolver and answers
 *    409 `key_in_progress`.
 *  - the answer goes out with `key_in_progress`; willSendResponse / onResolution
 *    (replay-marker.ts:79/:99) then stores "card declined" as the key's answer.
 * Expected: the client's call answers what its resolver came to ("card declined", the answer
 * its retry replays), as it does when the resolver succeeds (round 34's fix).
 * Control: the same apps with a resolver that succeeds: the payment, and its replay.
 * Severity: medium (the client is told "in progress, retry" for its own operation, and an
 * error it was never given is stored; nothing runs twice, no effect is kept).
 */
let pool: Pool;
let shape: 'side' | 'timeout' | undefined;
let declining = true;
const calls: Record<string, number> = {};

@Injectable()
class AppInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (shape === 'side') {
      const result$ = next.handle();
      result$.pipe(takeUntil(timer(50))).subscribe({ error: () => undefined });
      return result$;
    }
    if (shape === 'timeout') {
      return next.handle().pipe(
        timeout(50),
        catchError(() => next.handle()),
      );
    }
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

  @Mutation(() => Payment, { nullable: true })
  @Idempotent()
  async pay(@Args('ref') ref: string): Promise<Payment> {
    calls[ref] = (calls[ref] ?? 0) + 1;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    await new Promise((resolve) => setTimeout(resolve, 200));
    if (declining) throw new BadRequestException('card declined');
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

describe.each(GRAPHQL_DRIVERS)('adversary 35b: a detached resolver that fails, on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [PaymentsResolver, { provide: APP_INTERCEPTOR, useClass: AppInterceptor }],
    })
    class PaymentsModule {}
    fixture = await startPoolApp(`adv35b_detach_${driver}`, {
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
    const error = body.errors?.[0];
    const code = error?.extensions?.code;
    return (
      body.data?.pay ??
      (typeof code === 'string' && code.startsWith('key_') ? code : error?.message)
    );
  };

  async function run(ref: string, how: 'side' | 'timeout', decline: boolean) {
    declining = decline;
    shape = how;
    const first = await send(ref);
    shape = undefined;
    await new Promise((resolve) => setTimeout(resolve, 300));
    const retried = await send(ref);
    const rows = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
      [ref],
    );
    return { first, retried, ran: calls[ref], kept: (rows.rows[0] as { n: number }).n };
  }

  it.each(['side', 'timeout'] as const)(
    'control (%s): the resolver succeeds: the payment, and its replay',
    async (how) => {
      const ref = `${driver}-${how}-ok`;
      expect(await run(ref, how, false)).toEqual({
        first: { ref },
        retried: { ref },
        ran: 1,
        kept: 1,
      });
    },
  );

  it.each(['side', 'timeout'] as const)(
    '%s: the resolver declines: the client must get the error its retry replays',
    async (how) => {
      const ref = `${driver}-${how}-declined`;
      expect(await run(ref, how, true)).toEqual({
        first: 'card declined',
        retried: 'card declined',
        ran: 1,
        kept: 0,
      });
    },
  );
});
