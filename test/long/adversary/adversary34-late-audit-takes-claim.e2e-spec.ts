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
import { type Observable, switchMap, timer } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 34: an audit that subscribes to `next.handle()` on the side *after* an async step
 * of its own (`timer(100).pipe(switchMap(() => result$))`, standing for "write the audit row,
 * then log the result"), when the resolver failed before it: the audit's run is taken for the
 * app's retry, takes the failed try's claim over and runs the resolver again.
 *
 * App: Apollo (Express) and Mercurius (Fastify); a global interceptor that returns
 * `next.handle()` and subscribes to it on the side 100 ms later; `@Idempotent()` on `pay`,
 * which fails with a 502 "provider blip" on its first call (a final error) and pays on the
 * next. The operation: `mutation { pay(ref) { ref } s: slow(ms: 300) }` (a later field keeps
 * the answer from going out at once).
 * What happens: the returned run fails, its error waits (lib/graphql/run-field.ts:244-254,
 * `takeClaim` set on the run). The audit's run starts at 100 ms: `startFieldRun` finds the
 * failed run, ended with `takeClaim` (lib/graphql/field-runs.ts:61-68 `laterRunStep`:
 * `take-claim`), and lib/graphql/intercept-field.ts:64-66 hands it the claim: the waiting
 * error is cancelled and the resolver runs again, for the audit, and pays; that payment is
 * committed as the key's answer. The client's answer (GraphQL got the first run's error)
 * says "provider blip"; its retry replays the payment.
 * Expected: a run that is not the app's retry of the failed run (a side subscription, here
 * started late) answers what the field came to (the error, stored) and never runs the
 * resolver again; the client's answer is what a retry replays.
 * What tells it from a delayed `retry()`: here the failed run's error already reached GraphQL
 * (the resolver's result Nest hands GraphQL rejected with it); a retry's never does.
 * Control: the same audit subscribing at once (beside the returned one): the resolver runs
 * once, the error is the answer and is replayed.
 * Severity: high (the resolver runs twice in one operation; the client is told the payment
 * failed, a retry says it was made).
 */
let pool: Pool;
let auditDelayMs: number | undefined;
const calls: Record<string, number> = {};

@Injectable()
class AuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    if (auditDelayMs === 0) result$.subscribe({ error: () => undefined });
    if (auditDelayMs) {
      timer(auditDelayMs)
        .pipe(switchMap(() => result$))
        .subscribe({ error: () => undefined });
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
    if (calls[ref] === 1) throw new BadGatewayException('provider blip');
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

describe.each(GRAPHQL_DRIVERS)('adversary 34: a late side audit, on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [PaymentsResolver, { provide: APP_INTERCEPTOR, useClass: AuditInterceptor }],
    })
    class PaymentsModule {}
    fixture = await startPoolApp(`adv34_late_audit_${driver}`, {
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
      .send({ query: `mutation { pay(ref: "${ref}") { ref } s: slow(ms: 300) }` });
    const body = answer.body as {
      data?: { pay?: unknown } | null;
      errors?: { message: string }[];
    };
    return body.data?.pay ?? body.errors?.[0]?.message;
  };

  async function run(ref: string, delayMs: number) {
    auditDelayMs = delayMs;
    const first = await send(ref);
    auditDelayMs = undefined;
    await new Promise((resolve) => setTimeout(resolve, 200));
    const retried = await send(ref);
    const rows = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
      [ref],
    );
    return { first, retried, ran: calls[ref], kept: (rows.rows[0] as { n: number }).n };
  }

  const declined = { first: 'provider blip', retried: 'provider blip', ran: 1, kept: 0 };

  it('control: the audit subscribes at once: the resolver once, its error replayed', async () => {
    expect(await run(`${driver}-at-once`, 0)).toEqual(declined);
  });

  it('the audit subscribes 100 ms later: it must not run the resolver again', async () => {
    expect(await run(`${driver}-late`, 100)).toEqual(declined);
  });
});
