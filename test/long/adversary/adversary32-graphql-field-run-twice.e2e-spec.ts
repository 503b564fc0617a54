import {
  BadGatewayException,
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import { type Observable, retry } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 32: a GraphQL mutation field whose chain a global interceptor runs more
 * than once, as the HTTP routes' tests do (request-runs, adversary 25-31), and which the
 * library handles for a route but not for a field.
 *
 * The app: one global interceptor (APP_INTERCEPTOR, outside `@Idempotent()`; Nest applies it
 * to resolvers too), in one of two forms an app writes from the NestJS and rxjs docs:
 *  - audit on the side: `const r$ = next.handle(); r$.subscribe(log); return r$;`
 *  - retry once: `next.handle().pipe(retry(1))` (the provider blips a 502 the first time).
 * The mutation `pay(ref)` writes a payment row (`@Idempotent()` on the resolver method).
 *
 * What happens: lib/idempotency.interceptor.ts:110-111 hands a GraphQL field to
 * `interceptField` (lib/graphql/intercept-field.ts:36-124), which has none of the route's
 * run handling (no `RequestRun`/`startRun`, no `stepAside`, no `outcome`): each subscription
 * claims the key as a request of its own.
 *  - audit: both subscriptions claim at once (intercept-field.ts:97-105); one owns and runs the
 *    resolver, the other meets it in progress. The returned one (the client's) answers the
 *    library's `key_in_progress` (409) as the field's error while its payment is being made.
 *  - retry: the first try's 502 is stored as the field's answer (run-field.ts, a handler's
 *    error is final); the retry's subscription claims, finds the key done and replays the
 *    502: the app's retry never runs, and every later retry replays the blip for the key's
 *    life. A route with the same interceptor runs the last try (transactions.md, "the app
 *    retries the handler itself": the tries before it rolled back, the key given back).
 *
 * Expected: as for a route: the audit's field answers the resolver's payment (one row, the
 * retry replays it); the retried field answers the second try's payment (one row).
 *
 * Control: the same mutation with the interceptor passing the chain through once
 * (`return next.handle()`): the payment, one row, replayed.
 *
 * Severity: medium (audit: the library's 409 is the first answer to a mutation that is done
 * once; retry: a transient 502 stored as the key's final answer, defeating the app's retry).
 *
 * Fixed: a field's runs are registered by its GraphQL `info` (one per resolution,
 * lib/graphql/field-runs.ts): a run beside one not answered yet joins it, and a resolver's
 * error is stored as the operation's answer goes out (lib/graphql/stored-at-answer.ts), so
 * the app's retry takes the failed try's claim over and the error is never stored.
 */
let pool: Pool;
let mode: 'once' | 'audit' | 'retry' = 'once';
const calls: Record<string, number> = {};

@Injectable()
class RunsInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (mode === 'retry') return next.handle().pipe(retry(1));
    const result$ = next.handle();
    if (mode === 'audit') {
      result$.subscribe({
        next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      });
    }
    return result$;
  }
}

@ObjectType()
class Payment {
  @Field()
  ref!: string;

  @Field()
  status!: string;
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Payment)
  @Idempotent()
  async pay(@Args('ref') ref: string) {
    calls[ref] = (calls[ref] ?? 0) + 1;
    if (mode === 'retry' && calls[ref] === 1) throw new BadGatewayException('provider blip');
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    return { ref, status: 'captured' };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [PaymentsResolver, { provide: APP_INTERCEPTOR, useClass: RunsInterceptor }],
})
class PaymentsModule {}

describe('adversary 32: a GraphQL mutation field run twice by a global interceptor', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv32_graphql_runs', {
      module: PaymentsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const mutate = (ref: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', ref)
      .timeout(5_000)
      .send({ query: `mutation { pay(ref: "${ref}") { ref status } }` });

  /** The field's data, or its first error: the library's code, else its message. */
  const shape = (body: unknown) => {
    const { data, errors } = body as {
      data: Record<string, unknown> | null;
      errors?: { message?: string; extensions?: { code?: unknown } }[];
    };
    const error = errors?.[0];
    const code = error?.extensions?.code;
    return (
      data?.pay ?? (typeof code === 'string' && code.startsWith('key_') ? code : error?.message)
    );
  };
  const rows = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM payments WHERE ref = $1', [ref])).rows[0]
        .count,
    );

  const cases = [
    ['control: the chain run once', 'once'],
    ['an audit subscribes on the side and returns the chain', 'audit'],
    ['a retry(1) after a 502 blip', 'retry'],
  ] as const;
  it.each(cases)(
    '%s: the payment, one row, the retry replays it',
    async (name, as) => {
      mode = as;
      const ref = `adv32-gql-${as}`;
      const first = await mutate(ref);
      await new Promise((resolve) => setTimeout(resolve, 600));
      mode = 'once';
      const retried = await mutate(ref);
      if (process.env.ADV_DEBUG) {
        console.log(name, shape(first.body), shape(retried.body), await rows(ref), calls[ref]);
      }
      // Received, audit: first key_in_progress, one row, the retry replays the payment.
      // Received, retry: first 'provider blip', no row, the retry replays 'provider blip'.
      expect({
        first: shape(first.body),
        rows: await rows(ref),
        retried: shape(retried.body),
      }).toEqual({
        first: { ref, status: 'captured' },
        rows: 1,
        retried: { ref, status: 'captured' },
      });
    },
    20_000,
  );
});
