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
 * Adversary 35b: an audit that subscribes late (after the resolver's error went to GraphQL)
 * is told the same error (round 34's fix), but its own `retry(1)` then takes the failed try's
 * claim over: the resolver runs again for the audit and its second answer becomes the key's,
 * while the client was answered the first try's error.
 *
 * App: Apollo (Express) and Mercurius (Fastify); `@Idempotent()` (header key) on `pay`
 * (nullable; inserts a payment; its processor declines the first call, a BadRequestException,
 * and captures the next). A global interceptor returns `next.handle()` and, 100 ms later,
 * subscribes to it on the side with `retry(1)` (an audit that retries its own reading). The
 * operation is `mutation { a: pay(...) { ref } b: slow(ms: 400) }`: the answer goes out after
 * `b`, so `a`'s error waits to be stored meanwhile.
 * What happens:
 *  - `a` fails at once: lib/graphql/run-field.ts `failed()` (:265-281) parks the error
 *    (stored at the answer) and sets `takeClaim` on the client's run; GraphQL gets the error.
 *  - at 100 ms the audit's run starts: its `earlier` is the client's run, ended, no longer
 *    `delivering` -> lib/graphql/field-runs.ts:85 `join`; intercept-field.ts:58-60 copies the
 *    failed run's `takeClaim` onto the audit's run and throws the error, and `tracked()`
 *    (intercept-field.ts:85-92) marks the audit's run `delivering`.
 *  - the audit's `retry(1)` subscribes again in that turn: its `earlier` is the audit's run,
 *    ended, with the copied `takeClaim`, delivering -> `take-claim` (field-runs.ts:85,
 *    intercept-field.ts:64-66): the pending store is cancelled and the resolver runs again
 *    with the client's claim; it captures, and its payment commits as the key's answer.
 *  - the answer goes out after `b` with `a`: "card declined" (nothing pending to replace it).
 * Expected: as for the audit without its retry (round 34's late audit): the audit is told the
 * error, the resolver runs once, the key's answer is the error the client got.
 * Control: the same late audit without `retry(1)`.
 * Severity: high (the client is told "declined" and a payment is made and kept; its retry
 * replays a payment it was told failed; the resolver ran twice for one operation).
 */
let pool: Pool;
let audit: 'late' | 'late-retry' | undefined;
const calls: Record<string, number> = {};

@Injectable()
class LateAuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    const how = audit;
    if (how) {
      setTimeout(() => {
        const read$ = how === 'late-retry' ? result$.pipe(retry(1)) : result$;
        read$.subscribe({ error: () => undefined });
      }, 100);
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
    // The processor declines the first attempt and captures the next.
    if (calls[ref] === 1) throw new BadRequestException('card declined');
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
  'adversary 35b: a late audit with its own retry, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [PaymentsResolver, { provide: APP_INTERCEPTOR, useClass: LateAuditInterceptor }],
      })
      class PaymentsModule {}
      fixture = await startPoolApp(`adv35b_lateretry_${driver}`, {
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
        .send({ query: `mutation { a: pay(ref: "${ref}") { ref } b: slow(ms: 400) }` });
      const body = answer.body as {
        data?: { a?: unknown } | null;
        errors?: { message: string; path?: unknown[] }[];
      };
      return body.data?.a ?? body.errors?.find((error) => error.path?.[0] === 'a')?.message;
    };

    async function run(ref: string, how: 'late' | 'late-retry') {
      audit = how;
      const first = await send(ref);
      audit = undefined;
      await new Promise((resolve) => setTimeout(resolve, 200));
      const retried = await send(ref);
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
        [ref],
      );
      return { first, retried, ran: calls[ref], kept: (rows.rows[0] as { n: number }).n };
    }

    const declined = { first: 'card declined', retried: 'card declined', ran: 1, kept: 0 };

    it('control: a late audit without a retry is told the error; the resolver runs once', async () => {
      expect(await run(`${driver}-late`, 'late')).toEqual(declined);
    });

    it("a late audit's own retry(1) must not run the resolver again under the client's key", async () => {
      expect(await run(`${driver}-late-retry`, 'late-retry')).toEqual(declined);
    });
  },
);
