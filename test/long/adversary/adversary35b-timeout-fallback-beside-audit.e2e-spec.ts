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
import { catchError, type Observable, timeout } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 35b: a field's runs are chained to the latest run only (lib/graphql/field-runs.ts
 * `startFieldRun`): a run that joined the owner and then left breaks the chain, and the next
 * run claims the key as a new request would, meeting the owner's hold.
 *
 * App: Apollo (Express) and Mercurius (Fastify); a global interceptor that subscribes to
 * `next.handle()` on the side (an audit) and returns it under `timeout(50)` with a fallback
 * that reads the field again (`catchError(() => next.handle())`); `@Idempotent()` on `pay`,
 * which takes 200 ms and pays.
 * What happens: the audit's run owns the key; the returned run joins it
 * (lib/graphql/intercept-field.ts:54-63). At 50 ms the timeout unsubscribes the returned run:
 * `tracked()`'s teardown (intercept-field.ts:100-107) ends it `claimAgain` (it set no
 * `detachedSettled`: it owns nothing). The fallback's run finds that run as its `earlier`
 * (field-runs.ts:57-62; the owner is no longer in the chain): ended, no `takeClaim` ->
 * `claim` (field-runs.ts:80), claimOrDecide meets the audit run's hold: 409
 * `key_in_progress`, while the resolver goes on and pays.
 * Expected: as without the audit (the control): the fallback joins the resolver that runs and
 * answers its payment (round 34's `detachedSettled` design), not "in progress, retry later".
 * Control: the same interceptor without the audit: the fallback answers the payment.
 * Severity: medium-low (adding an audit turns the client's own answer into 409 for a payment
 * that was made; nothing runs twice, the retry replays it).
 */
let pool: Pool;
let withAudit = false;
const calls: Record<string, number> = {};

@Injectable()
class SideAuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    if (withAudit) result$.subscribe({ error: () => undefined });
    // The call's own timeout, with a fallback that reads the field again.
    return result$.pipe(
      timeout(50),
      catchError(() => next.handle()),
    );
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
  'adversary 35b: a timeout fallback beside an audit, on %s',
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
      fixture = await startPoolApp(`adv35b_tofb_${driver}`, {
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
        errors?: { message: string }[];
      };
      return body.data?.pay ?? body.errors?.[0]?.message;
    };

    async function run(ref: string, audit: boolean) {
      withAudit = audit;
      const first = await send(ref);
      withAudit = false;
      await new Promise((resolve) => setTimeout(resolve, 200));
      const retried = await send(ref);
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
        [ref],
      );
      return { first, retried, ran: calls[ref], kept: (rows.rows[0] as { n: number }).n };
    }

    const paid = (ref: string) => ({ first: { ref }, retried: { ref }, ran: 1, kept: 1 });

    it('control: no audit: the fallback answers the payment, once', async () => {
      expect(await run(`${driver}-alone`, false)).toEqual(paid(`${driver}-alone`));
    });

    it('an audit beside it: the fallback must still answer the payment', async () => {
      expect(await run(`${driver}-audited`, true)).toEqual(paid(`${driver}-audited`));
    });
  },
);
