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
 * Adversary 39b: the app's retry of a field after a delay of two seconds (a provider blip's
 * usual back-off) is told the first try's error: by then the error has been stored by its
 * fallback, and the retry never runs the resolver; the 502 is the key's answer for ever.
 *
 * App: Apollo (Express) and Mercurius (Fastify), the default options (`leaseMs` 5000, the
 * heartbeat on). A global resilience interceptor, `next.handle().pipe(retry({ count: 1,
 * delay: 2000 }))`; `@Idempotent()` on `pay`, which fails with a 502 "provider blip" on its
 * first call and pays on the next.
 * What happens: the first try's error waits for the operation's answer to be stored
 * (lib/graphql/stored-at-answer.ts:42-60), with a fallback timer of `storeWaitMs(leaseMs)`
 * (lib/graphql/run-field.ts:53-55): 5000 / 3 = 1666 ms, "a client that left: no answer goes
 * out". The operation's answer is still waiting for the app's retry, but at 1666 ms the
 * fallback stores the 502. The retry subscribes at 2000 ms: `laterRunStep` says `take-claim`,
 * `takeClaim()` (run-field.ts:313-316) finds the store begun (`cancel()` false,
 * stored-at-answer.ts:83-90), hands no claim, and the run claims the key like any request:
 * the stored 502, replayed. The resolver never runs again.
 * Expected: graphql.md: "One that retries it after its error (rxjs `retry(n)`, at once or with
 * a `delay` ...) runs it again: ... its error never stored, its claim handed to the next
 * try, whose answer is the key's". No bound on the delay is stated; the key's lease is
 * renewed by the heartbeat while a handler runs, and could be while its error waits.
 * Control: the same retry with a delay of 200 ms: the resolver runs again, the payment is the
 * answer, replayed.
 * Severity: medium (no double effect; the app's retry is lost and the first try's 502 is the
 * key's answer for ever).
 */
let pool: Pool;
let delayMs = 200;
const calls: Record<string, number> = {};

@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry({ count: 1, delay: delayMs }));
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

describe.each(GRAPHQL_DRIVERS)('adversary 39b: a retry after a 2 s delay, on %s', (driver) => {
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
    fixture = await startPoolApp(`adv39b_retrydelay_${driver}`, {
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

  async function run(ref: string, delay: number) {
    delayMs = delay;
    const first = await send(ref);
    delayMs = 200;
    const retried = await send(ref);
    const rows = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
      [ref],
    );
    return { first, retried, ran: calls[ref], kept: (rows.rows[0] as { n: number }).n };
  }

  const paid = (ref: string) => ({ first: { ref }, retried: { ref }, ran: 2, kept: 1 });

  it('control: the retry 200 ms later runs the resolver again: the payment', async () => {
    expect(await run(`${driver}-soon`, 200)).toEqual(paid(`${driver}-soon`));
  });

  // Stated limit (docs/guides/graphql.md): a field's error waits for the app's retry at most
  // leaseMs / 3, then it is stored whatever the operation does (an answer the library's hook
  // never sees would otherwise hold the key with nobody to end it); a later retry is told it.
  // Never a double effect. Extending the wait while the app's chain still holds the error
  // would need a bound of its own.
  it.skip('the retry 2 s later must run the resolver again too', async () => {
    expect(await run(`${driver}-later`, 2000)).toEqual(paid(`${driver}-later`));
  });
});
