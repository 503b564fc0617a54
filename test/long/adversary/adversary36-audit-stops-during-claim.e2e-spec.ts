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
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { Client, type Pool } from 'pg';
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
 * Adversary 36: round 35b's fix (a side audit that stops before the resolver started makes the
 * returned run wait for the key's give-back) covers an audit that stops once the claim landed
 * (in a pipe), not one that stops WHILE THE CLAIM IS IN FLIGHT.
 *
 * App: Apollo (Express) and Mercurius (Fastify); `@Idempotent()` on `pay` (key in the
 * `Idempotency-Key` header); a global interceptor that subscribes to `next.handle()` on the
 * side with `takeUntil(timer(50))` (an audit with a time limit) and returns `next.handle()`.
 * The claim is slow (the keys' table is briefly locked by another session, 300 ms: a busy
 * database, a vacuum, a migration).
 * What happens: the side run claims first; the returned run joins it
 * (lib/graphql/intercept-field.ts:57-72). At 50 ms the audit leaves while the claim is in
 * flight: runField never subscribed, so no `detachedSettled` is set
 * (lib/graphql/run-field.ts:206-218 only covers a claim that landed), and `tracked()`'s
 * teardown ends the side run `claimAgain` at once (intercept-field.ts:109-117). The returned
 * run claims at once, beside the side run's claim still in flight. GraphQL's claim is made
 * without the `left` hook the HTTP route uses to wait for an orphaned claim's give-back
 * (`claimFor`, intercept-field.ts:200-216 passes no `left` to `claimOrDecide`,
 * lib/http/claim-or-decide.ts:66-83; `whileSubscribed`, lib/claim/while-subscribed.ts). The
 * side's orphaned claim lands first and holds the key; the returned run finds it held:
 * the client is answered `key_in_progress` for a request nobody runs, the payment not made.
 * Expected: the returned run waits for the orphaned claim's give-back, then claims: the
 * payment, once (as round 35b's fix does when the audit leaves in a pipe).
 * Control: the same slow claim, the audit watching to the end: the payment, once.
 * Severity: medium (a client told "in progress" for a request that nothing runs; its retry
 * works, after the give-back).
 */
let pool: Pool;
let admin: Client;
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

describe.each(GRAPHQL_DRIVERS)(
  'adversary 36: a side audit that stops while the claim is in flight, on %s',
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
      fixture = await startPoolApp(`adv36_claimstop_${driver}`, {
        module: PaymentsModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
      admin = new Client({ connectionString: fixture.database.url });
      await admin.connect();
    }, 60_000);

    afterAll(async () => {
      await admin?.end();
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
      return body.data?.pay ?? body.errors?.[0]?.extensions?.code ?? body.errors?.[0]?.message;
    };

    async function run(ref: string, delayMs: number) {
      stopAfterMs = delayMs;
      // The claim is slow: the keys' table is locked by another session for 300 ms.
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE idempotency_keys IN SHARE MODE');
      const sending = send(ref);
      await new Promise((resolve) => setTimeout(resolve, 300));
      await admin.query('ROLLBACK');
      const first = await sending;
      stopAfterMs = undefined;
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
        [ref],
      );
      return { first, ran: calls[ref] ?? 0, kept: (rows.rows[0] as { n: number }).n };
    }

    const paid = (ref: string) => ({ first: { ref }, ran: 1, kept: 1 });

    it('control: the audit watches to the end: the payment, once', async () => {
      expect(await run(`${driver}-claim-to-the-end`, 0)).toEqual(
        paid(`${driver}-claim-to-the-end`),
      );
    });

    it('the audit stops watching at 50 ms, in the claim: the client must get its payment', async () => {
      expect(await run(`${driver}-claim-stops`, 50)).toEqual(paid(`${driver}-claim-stops`));
    });
  },
);
