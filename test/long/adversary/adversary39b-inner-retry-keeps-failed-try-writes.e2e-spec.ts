import { jest } from '@jest/globals';
import {
  BadGatewayException,
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  UseInterceptors,
} from '@nestjs/common';
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
 * Adversary 39b: a retry interceptor written above `@Idempotent()` (inside it, as the guides
 * say of a `timeout()` written there) runs the resolver again in the same transaction: the
 * failed try's writes are kept and commit with the retry's answer. One key, one stored
 * payment, two ledger entries.
 *
 * App: Apollo (Express) and Mercurius (Fastify). A mutation `payInside(ref)` with the app's
 * resilience interceptor on it, `@UseInterceptors(RetryInterceptor)` written above
 * `@Idempotent()` (`next.handle().pipe(retry({ count: 1, delay: 20 }))`, the same class the
 * app registers globally elsewhere). The resolver writes its ledger entry, then calls the
 * provider, which answers a 502 blip the first time.
 * What happens: Nest runs the interceptors in the order the decorators list them, so the
 * retry is inside the library's: lib/graphql/run-field.ts:179 subscribes `runInContext(context,
 * next)` once, with one `IdempotencyContext` and one transaction for the field; the retry
 * resubscribes `next.handle()` inside that subscription, and Nest calls the resolver again
 * (lib/idempotent.decorator.ts:55-75 takes each call as the field's own, "an interceptor
 * inside `@Idempotent()` that retries it ... calls it again", replacing `handlerReturned`
 * only). Nothing rolls back the first call's writes (no savepoint per call): the first try's
 * ledger row stays in the transaction, the second try adds its own, and run-field.ts:140
 * commits both with the answer. The key's answer is one payment; the ledger says two.
 * Expected: a try that failed leaves no effect (graphql.md: "the failed try's effects rolled
 * back, its error never stored, its claim handed to the next try"), as with the same retry
 * interceptor outside `@Idempotent()`; or the library refuses a second call of the resolver
 * inside one run. The guides describe a timeout inside `@Idempotent()`, never a retry inside it.
 * Control: the same interceptor written below `@Idempotent()` (outside it), on `payOutside`:
 * the failed try rolls back, one ledger row.
 * Severity: critical by the guide (a double effect committed with the key's answer); the
 * app's own retry called the resolver twice, and the decorator order decides it silently.
 */
let pool: Pool;
const calls: Record<string, number> = {};

/** The app's resilience interceptor: one retry after a failure. */
@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry({ count: 1, delay: 20 }));
  }
}

@ObjectType()
class Payment {
  @Field()
  ref!: string;
}

async function pay(ref: string): Promise<Payment> {
  calls[ref] = (calls[ref] ?? 0) + 1;
  // The ledger entry first, then the provider's call: a 502 blip the first time.
  await pool.query('INSERT INTO ledger (ref) VALUES ($1)', [ref]);
  if (calls[ref] === 1) throw new BadGatewayException('provider blip');
  return { ref };
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => Number)
  ping(): number {
    return 1;
  }

  /** The retry written above `@Idempotent()`: inside it. */
  @Mutation(() => Payment, { nullable: true })
  @UseInterceptors(RetryInterceptor)
  @Idempotent()
  payInside(@Args('ref') ref: string): Promise<Payment> {
    return pay(ref);
  }

  /** The retry written below `@Idempotent()`: outside it (the control). */
  @Mutation(() => Payment, { nullable: true })
  @Idempotent()
  @UseInterceptors(RetryInterceptor)
  payOutside(@Args('ref') ref: string): Promise<Payment> {
    return pay(ref);
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

describe.each(GRAPHQL_DRIVERS)('adversary 39b: a retry inside @Idempotent(), on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [PaymentsResolver],
    })
    class PaymentsModule {}
    fixture = await startPoolApp(`adv39b_innerretry_${driver}`, {
      module: PaymentsModule,
      adapter: driver === 'apollo' ? 'express' : 'fastify',
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE ledger (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function run(field: 'payInside' | 'payOutside') {
    const ref = `${driver}-${field}`;
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', ref)
      .send({ query: `mutation { ${field}(ref: "${ref}") { ref } }` });
    const rows = await fixture.admin.query('SELECT count(*)::int AS n FROM ledger WHERE ref = $1', [
      ref,
    ]);
    return {
      errors: (answer.body as { errors?: unknown }).errors,
      answer: (answer.body as { data?: Record<string, unknown> | null }).data?.[field],
      ran: calls[ref],
      kept: (rows.rows[0] as { n: number }).n,
    };
  }

  it('control: the retry written below @Idempotent() (outside): the failed try rolled back, one ledger row', async () => {
    expect(await run('payOutside')).toEqual({
      errors: undefined,
      answer: { ref: `${driver}-payOutside` },
      ran: 2,
      kept: 1,
    });
  });

  // The header's second outcome: the failed try's writes cannot be undone apart from the
  // request's transaction, so the library refuses the second call (handler_retried_inside, a
  // 500 that says to write @Idempotent() above the retry): rolled back, nothing stored.
  it('the retry written above @Idempotent() (inside): refused, the failed try leaves no ledger row', async () => {
    const seen = await run('payInside');
    expect({ answer: seen.answer ?? null, ran: seen.ran, kept: seen.kept }).toEqual({
      answer: null,
      ran: 1,
      kept: 0,
    });
    expect(JSON.stringify(seen.errors)).toContain('handler_retried_inside');
  });
});
