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
import { first, type Observable } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 39b: an audit that watches the field's first value only (`first()`, as
 * transactions.md names it: "a side subscription that takes the first value only") makes the
 * client's first answer say it is a replay: `extensions.idempotency.replayed: ["pay"]` on a
 * call that ran the resolver, and a `replayed` event for it.
 *
 * App: Apollo (Express) and Mercurius (Fastify); a global audit interceptor that subscribes to
 * `next.handle().pipe(first())` on the side, at once, and returns `next.handle()` (the
 * library's own audit order, test/graphql-field-runs.e2e-spec.ts, with `first()` added, as an
 * audit that logs the answer and is done). `@Idempotent()` on `pay`.
 * What happens: the audit's run (run 1) runs the resolver; the returned run (run 2) joins it
 * (lib/graphql/intercept-field.ts:64-80). The answer is committed, then emitted
 * (lib/graphql/run-field.ts:169-171: `next`, then `complete`); `first()` takes the value and
 * unsubscribes before `complete` reaches the run: `tracked()`'s teardown
 * (intercept-field.ts:119-133) finds the run not ended and marks it `left`, then ends it with
 * `claimAgain`. Run 2, joined to it, is told `claimAgain` and claims the key like a new
 * request (intercept-field.ts:77): it finds the answer just stored and replays it
 * (intercept-field.ts:174-177, `markReplayed`). The client's first answer is the right data,
 * marked as a replay.
 * Expected: no replay marker on the answer of the call that ran the resolver (graphql.md:
 * "A field that ran ... [is] not in the list; an answer with no replayed field has no
 * marker"); the marker on the retry.
 * Control: the same audit without `first()` (it watches to the end): no marker on the first
 * answer, the marker on the retry.
 * Severity: low (the data is right and stored once; the marker, and the `replayed` event the
 * app's metrics count, are wrong on the first answer).
 */
let pool: Pool;
let takesFirst = false;
const calls: Record<string, number> = {};

@Injectable()
class AuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    (takesFirst ? result$.pipe(first()) : result$).subscribe({ error: () => undefined });
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

  @Mutation(() => Payment)
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

describe.each(GRAPHQL_DRIVERS)('adversary 39b: an audit of the first value, on %s', (driver) => {
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
    fixture = await startPoolApp(`adv39b_firstaudit_${driver}`, {
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

  const send = async (ref: string) =>
    (
      await request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', ref)
        .timeout(10_000)
        .send({ query: `mutation { pay(ref: "${ref}") { ref } }` })
    ).body as unknown;

  async function run(ref: string, auditTakesFirst: boolean) {
    takesFirst = auditTakesFirst;
    const answered = await send(ref);
    takesFirst = false;
    const retried = await send(ref);
    const rows = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
      [ref],
    );
    return { answered, retried, ran: calls[ref], kept: (rows.rows[0] as { n: number }).n };
  }

  const expected = (ref: string) => ({
    answered: { data: { pay: { ref } } },
    retried: { data: { pay: { ref } }, extensions: { idempotency: { replayed: ['pay'] } } },
    ran: 1,
    kept: 1,
  });

  it('control: the audit watches to the end: no marker on the first answer', async () => {
    expect(await run(`${driver}-whole`, false)).toEqual(expected(`${driver}-whole`));
  });

  // Stated limit (docs/guides/graphql.md, low): an audit's first() stops watching before the
  // resolver completes, its run counts as left, and the returned run claims again and replays
  // the stored answer, marker included: the data and the effects are right.
  it.skip('the audit takes the first value: the first answer must not say it is a replay', async () => {
    expect(await run(`${driver}-first`, true)).toEqual(expected(`${driver}-first`));
  });
});
