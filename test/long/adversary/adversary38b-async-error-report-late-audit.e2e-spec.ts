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
import { type Client, type Pool } from 'pg';
import {
  catchError,
  from,
  mergeMap,
  type Observable,
  retry,
  switchMap,
  throwError,
  timer,
} from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 38b: an error-reporting interceptor that writes the error somewhere (I/O) before
 * it rethrows it makes a late side audit look like the app's retry: the audit's run takes the
 * failed try's claim over and runs the resolver again.
 *
 * App: Apollo (Express) and Mercurius (Fastify); two global interceptors. The outer one is an
 * ordinary error reporter: `catchError(err => from(report(err)).pipe(mergeMap(() =>
 * throwError(() => err))))`, where `report` inserts the error into an `error_log` table on a
 * connection of its own (a Sentry call, a log shipper: any awaited I/O), then rethrows it
 * unchanged. The inner one is adversary 34's audit: it returns `next.handle()` and subscribes
 * to it on the side 100 ms later. `@Idempotent()` on `pay`, which fails with a 502 "provider
 * blip" on its first call (a final error) and pays on the next. Operation:
 * `mutation { pay(ref) { ref } s: slow(ms: 300) }`.
 * What happens: the returned run fails; lib/graphql/intercept-field.ts:101-104 `tracked()`
 * reads the end of the subscriber chain as the error is delivered. The reporter's `catchError`
 * took the error and subscribed to its async `report`, so the chain's end (Nest's, towards
 * GraphQL) is still open: `run.errorHeld = true`, read as "the app's retry() took it", and it
 * stays true after the reporter rethrows and the error reaches GraphQL. The audit's run at
 * 100 ms: lib/graphql/field-runs.ts:338-339 `laterRunStep` -> `take-claim` (the error still
 * waits for the operation's answer, `takeClaim` set at lib/graphql/run-field.ts:313), so
 * intercept-field.ts:75-77 hands it the claim: the waiting error is cancelled, the resolver
 * runs again (for the audit, whose subscriber nobody reads) and pays; that payment is
 * committed as the key's answer. The client was told "provider blip"; its retry replays the
 * payment.
 * Expected: the error went on to GraphQL (after an await); a run that is not the app's retry
 * answers what the field came to (the error, stored), the resolver runs once, the client's
 * answer is what its retry replays (as adversary 34's fix promises).
 * The same with the outer interceptor a retry whose `delay` asks first (a query: is the error
 * transient?) and then gives up (`retry({ count: 1, delay: e => from(ask(e)).pipe(mergeMap(()
 * => throwError(() => e))) })`): the error is held while it asks, `errorHeld` is true, no
 * retry comes, and the late audit takes the claim over the same way.
 * Control: the same app whose reporter records the error synchronously before it rethrows:
 * the resolver runs once, the error is stored and replayed.
 * Severity: high (the resolver runs twice in one operation; the client is told the payment
 * failed, its retry says it was made).
 */
let pool: Pool;
/** The error log's own connection (not the library's pool). */
let logPool: Client;
/** The outer interceptor on an error: records it at once, after I/O, or a retry that gives up. */
let outer: 'sync' | 'report' | 'retry-gives-up' = 'sync';
const calls: Record<string, number> = {};
const reported: string[] = [];

/** The app's error reporter: records the error, then rethrows it unchanged. */
@Injectable()
class ErrorReportInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (outer === 'retry-gives-up') {
      // Asks the log's database whether the error is worth a retry (here: it is not).
      return next.handle().pipe(
        retry({
          count: 1,
          delay: (error: Error) =>
            from(logPool.query('SELECT false AS transient')).pipe(
              mergeMap(() => throwError(() => error)),
            ),
        }),
      );
    }
    return next.handle().pipe(
      catchError((error: Error) => {
        if (outer === 'sync') {
          reported.push(error.message);
          return throwError(() => error);
        }
        // On a connection of its own (the log's database), not the request's.
        const report = logPool.query('INSERT INTO error_log (message) VALUES ($1)', [
          error.message,
        ]);
        return from(report).pipe(mergeMap(() => throwError(() => error)));
      }),
    );
  }
}

/** Adversary 34's audit: subscribes to the result on the side, 100 ms later. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    timer(100)
      .pipe(switchMap(() => result$))
      .subscribe({ error: () => undefined });
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

describe.each(GRAPHQL_DRIVERS)(
  'adversary 38b: an async error reporter and a late audit, on %s',
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
          { provide: APP_INTERCEPTOR, useClass: ErrorReportInterceptor },
          { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
        ],
      })
      class PaymentsModule {}
      fixture = await startPoolApp(`adv38b_asyncreport_${driver}`, {
        module: PaymentsModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
          await owner.query('CREATE TABLE error_log (id serial PRIMARY KEY, message text)');
        },
      });
    }, 60_000);

    beforeAll(() => {
      logPool = fixture.admin;
    });

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

    async function run(ref: string, using: typeof outer) {
      outer = using;
      const first = await send(ref);
      outer = 'sync';
      await new Promise((resolve) => setTimeout(resolve, 200));
      const retried = await send(ref);
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
        [ref],
      );
      return { first, retried, ran: calls[ref], kept: (rows.rows[0] as { n: number }).n };
    }

    const declined = { first: 'provider blip', retried: 'provider blip', ran: 1, kept: 0 };

    it('control: the reporter records the error at once: the resolver once, its error replayed', async () => {
      expect(await run(`${driver}-sync`, 'sync')).toEqual(declined);
    });

    it('the reporter writes the error to the database first: the audit must not run the resolver again', async () => {
      expect(await run(`${driver}-async`, 'report')).toEqual(declined);
    });

    it('a retry whose delay asks first, then gives up: the audit must not run the resolver again', async () => {
      expect(await run(`${driver}-gives-up`, 'retry-gives-up')).toEqual(declined);
    });
  },
);
