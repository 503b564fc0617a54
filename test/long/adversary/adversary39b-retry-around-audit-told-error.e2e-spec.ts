import { jest } from '@jest/globals';
import {
  BadGatewayException,
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
import { type Observable, retry, switchMap, timer } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 39b: an audit interceptor inside the app's retry interceptor (both global, the
 * usual pair) hides the retry from the library: the app's retry is told the first try's
 * error and never runs the resolver again; that error is stored as the key's answer for ever.
 *
 * App: Apollo (Express) and Mercurius (Fastify); two global interceptors, as a team writes
 * them: the outer one is the app's resilience interceptor, `next.handle().pipe(retry({ count:
 * 1, delay: 50 }))` (graphql.md: "One that retries it after its error (rxjs `retry(n)`, at
 * once or with a `delay`) runs it again"); the inner one an audit that returns `next.handle()`
 * and subscribes to it on the side, either at once (the library's own test's audit,
 * test/graphql-field-runs.e2e-spec.ts) or 100 ms later (adversary 34's). `@Idempotent()` on
 * `pay`, which talks to a provider for 300 ms and fails with a 502 "provider blip" on its first
 * call, and pays on the next.
 *
 * What happens: Nest's `next.handle()` is a `defer()`: the retry's new subscription calls the
 * audit's `intercept()` again, so each try has an audit run and a returned run of the field,
 * and `startFieldRun` (lib/graphql/field-runs.ts:81-86) keeps only the latest run per `info`.
 * At once: the retry's own audit run (run 3) is the first to reach the library; its chain is
 * apart from the failed returned run's (run 2's), so `retriedBy` (field-runs.ts:49-51) is
 * false and `laterRunStep` (field-runs.ts:119) answers `join`: run 3 is told the 502
 * (intercept-field.ts:64-80), and the retry's returned run (run 4) joins run 3, told it too.
 * In flight: the first try's audit run (run 2, at 100 ms) replaced the returned run 1 as the
 * latest; the retry's run 3 is compared with run 2's chain (the audit's, closed), not with
 * run 1's whose error its operator took: `join`, told the 502. Either way run 1's
 * `takeClaim` (run-field.ts:313) is never called, the 502 is stored as the operation's
 * answer goes out, and every retry of the key replays it.
 * Expected: the app's retry runs the resolver again (its claim handed over, the 502 never
 * stored) and the payment is the key's answer, as without the audit.
 * Control: the same app without the audit (the same retry interceptor): the retry runs, the
 * payment is the answer, replayed.
 * Severity: medium (no double effect; the app's retry is lost and the first try's 502 is
 * the key's answer for ever, where the docs promise the retry's answer).
 */
let pool: Pool;
type Audit = 'none' | 'at-once' | 'in-flight';
let audit: Audit = 'none';
const calls: Record<string, number> = {};

/** The app's resilience interceptor: one retry, 50 ms after a failure. */
@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry({ count: 1, delay: 50 }));
  }
}

/** The app's audit: watches the result on the side (at once, or 100 ms later). */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    const quiet = { error: () => undefined };
    if (audit === 'at-once') result$.subscribe(quiet);
    if (audit === 'in-flight') {
      timer(100)
        .pipe(switchMap(() => result$))
        .subscribe(quiet);
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
    // The provider's call.
    await new Promise((resolve) => setTimeout(resolve, 300));
    if (calls[ref] === 1) throw new BadGatewayException('provider blip');
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

describe.each(GRAPHQL_DRIVERS)('adversary 39b: a retry around an audit, on %s', (driver) => {
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
        { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
      ],
    })
    class PaymentsModule {}
    fixture = await startPoolApp(`adv39b_retryaudit_${driver}`, {
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
    const body = answer.body as { data?: { pay?: unknown } | null; errors?: { message: string }[] };
    return body.data?.pay ?? body.errors?.[0]?.message;
  };

  async function run(ref: string, using: Audit) {
    audit = using;
    const first = await send(ref);
    audit = 'none';
    await new Promise((resolve) => setTimeout(resolve, 200));
    const retried = await send(ref);
    const rows = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
      [ref],
    );
    return { first, retried, ran: calls[ref], kept: (rows.rows[0] as { n: number }).n };
  }

  const paid = (ref: string) => ({ first: { ref }, retried: { ref }, ran: 2, kept: 1 });

  it('control: no audit: the app’s retry runs the resolver again, its payment is the answer', async () => {
    expect(await run(`${driver}-none`, 'none')).toEqual(paid(`${driver}-none`));
  });

  it('an audit that subscribes at once, inside the retry: the app’s retry must still run it again', async () => {
    expect(await run(`${driver}-at-once`, 'at-once')).toEqual(paid(`${driver}-at-once`));
  });

  it('the audit subscribes while the resolver runs: the app’s retry must still run it again', async () => {
    expect(await run(`${driver}-in-flight`, 'in-flight')).toEqual(paid(`${driver}-in-flight`));
  });
});
