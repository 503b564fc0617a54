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
import { type Pool } from 'pg';
import { type Observable, takeUntil, timer } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 37b: rounds 34-36 fixed a side audit that stops watching before the resolver
 * started, while its claim is in flight, and while the resolver runs; not one that stops
 * AFTER THE RESOLVER RETURNED, WHILE ITS ANSWER IS WALKED AND STORED: the client's own call is
 * answered `key_in_progress` for the payment its resolver made.
 *
 * App: Apollo (Express) and Mercurius (Fastify); a global interceptor that subscribes to
 * `next.handle()` on the side with `takeUntil(timer(100))` (an audit with a time limit) and
 * returns `next.handle()`; `@Idempotent()` on `pay` (key in the `Idempotency-Key` header),
 * which inserts its row and returns the payment with its receipt as a lazy relation (a
 * Promise, as TypeORM's `Promise<Receipt>`), which the operation selects and which loads in
 * 300 ms (the library awaits it to store it, as GraphQL does: docs/guides/graphql.md).
 * What happens: the side run owns the key, the returned run joins it. The resolver returns at
 * once; runField's `end()` sets `settled` (lib/graphql/run-field.ts:160) and walks and
 * commits the answer. At 100 ms, in the walk, the audit is unsubscribed: the teardown returns
 * at once as `settled` (run-field.ts:202), without setting `detachedSettled` as a detach does
 * (run-field.ts:154-158), so `tracked()`'s teardown ends the side run `claimAgain` at once
 * (lib/graphql/intercept-field.ts:109-121). The returned run claims (intercept-field.ts:70)
 * while the side run's answer is still being stored, meets the key held and answers 409
 * `key_in_progress`; the payment commits a moment later.
 * Expected: the returned run answers what the resolver came to (the payment), as when the
 * audit watches to the end or stops while the resolver runs (round 34's fix).
 * Control: the same audit watching to the end: the payment, once.
 * Severity: medium (the client's own first call is told "in progress, retry later" for a
 * payment that was made; nothing runs twice, the retry replays it).
 */
let pool: Pool;
let stopAfterMs: number | undefined;
const calls: Record<string, number> = {};

/** An audit on the side with a time limit; the interceptor returns `next.handle()`. */
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
class Receipt {
  @Field()
  number!: string;
}

@ObjectType()
class Payment {
  @Field()
  ref!: string;

  /** A lazy relation (TypeORM's `Promise<Receipt>`): loaded when read, here in 300 ms. */
  @Field(() => Receipt)
  receipt!: Promise<Receipt>;
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
    const receipt = new Promise<Receipt>((resolve) =>
      setTimeout(() => resolve({ number: `R-${ref}` }), 300),
    );
    return { ref, receipt };
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
  'adversary 37b: a side audit that stops while the answer is stored, on %s',
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
      fixture = await startPoolApp(`adv37b_storestop_${driver}`, {
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
        .send({ query: `mutation { pay(ref: "${ref}") { ref receipt { number } } }` });
      const body = answer.body as {
        data?: { pay?: unknown } | null;
        errors?: { message: string; extensions?: { code?: unknown } }[];
      };
      return body.data?.pay ?? body.errors?.[0]?.extensions?.code ?? body.errors?.[0]?.message;
    };

    async function run(ref: string, stopAfter: number) {
      stopAfterMs = stopAfter;
      const first = await send(ref);
      stopAfterMs = undefined;
      await new Promise((resolve) => setTimeout(resolve, 400));
      const again = await send(ref);
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
        [ref],
      );
      return { first, again, ran: calls[ref] ?? 0, kept: (rows.rows[0] as { n: number }).n };
    }

    const paid = (ref: string) => {
      const payment = { ref, receipt: { number: `R-${ref}` } };
      return { first: payment, again: payment, ran: 1, kept: 1 };
    };

    it('control: the audit watches to the end: the payment, once', async () => {
      expect(await run(`${driver}-to-the-end`, 0)).toEqual(paid(`${driver}-to-the-end`));
    });

    it('the audit stops at 100 ms, as the answer is stored: the client must get its payment', async () => {
      expect(await run(`${driver}-while-stored`, 100)).toEqual(paid(`${driver}-while-stored`));
    });
  },
);
