import { jest } from '@jest/globals';
import {
  BadGatewayException,
  BadRequestException,
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { Client, type Pool } from 'pg';
import { type Observable, retry } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type GraphqlDriverName } from './support/graphql-app.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('./support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * A mutation field whose chain an app's global interceptor runs more than once, as a route's
 * may be (test/request-runs.e2e-spec.ts): an audit that subscribes on the side, and a retry
 * (at once, or after a delay). The field's runs are one request's: the resolver runs once for
 * the audit, again for the retry, and the key's answer is what the client got. A resolver's
 * error is stored as the operation's answer goes out (lib/graphql/stored-at-answer.ts), so a
 * retry of the field can still take the key over; stored, it is replayed as before; not
 * stored, the client is told so, not given an error its retry would not get.
 */
let pool: Pool;
let admin: Client;
type Interceptor = 'once' | 'audit' | 'retry' | 'retry-later';
type Resolver = 'pays' | 'blip-once' | 'declines' | 'declines-store-down';
let around: Interceptor = 'once';
let behaves: Resolver = 'pays';
const calls: Record<string, number> = {};

@Injectable()
class RunsInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (around === 'retry') return next.handle().pipe(retry(1));
    if (around === 'retry-later') return next.handle().pipe(retry({ count: 1, delay: 150 }));
    const result$ = next.handle();
    if (around === 'audit') {
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
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    await new Promise((resolve) => setTimeout(resolve, 50));
    if (behaves === 'blip-once' && calls[ref] === 1) {
      throw new BadGatewayException('provider blip');
    }
    if (behaves === 'declines-store-down') {
      // The keys' table locked until the answer went out: the error's store outlasts its
      // deadline (databaseTimeoutMs) as the answer goes out.
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
    }
    if (behaves.startsWith('declines')) throw new BadRequestException('card declined');
    return { ref, status: 'captured' };
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

describe.each(GRAPHQL_DRIVERS)('a mutation field run more than once, on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 700 }),
        }),
        graphqlModule(driver),
      ],
      providers: [PaymentsResolver, { provide: APP_INTERCEPTOR, useClass: RunsInterceptor }],
    })
    class PaymentsModule {}
    fixture = await startPoolApp(`gql_field_runs_${driver}`, {
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

  const mutate = (ref: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', ref)
      .timeout(5_000)
      .send({ query: `mutation { pay(ref: "${ref}") { ref status } }` });

  /** The field's data, or its error: the library's code, else its message. */
  const shape = (body: unknown) => {
    const { data, errors } = body as {
      data: Record<string, unknown> | null;
      errors?: { message?: string; path?: unknown[]; extensions?: { code?: unknown } }[];
    };
    const error = errors?.[0];
    const code = error?.extensions?.code;
    if (data?.pay) return data.pay;
    expect(error?.path).toEqual(['pay']);
    return typeof code === 'string' && /^(key|store)_/.test(code) ? code : error?.message;
  };
  const rows = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM payments WHERE ref = $1', [ref])).rows[0]
        .count,
    );

  /** The first answer, the rows, the resolver's runs, and a later retry's answer. */
  async function run(ref: string, interceptor: Interceptor, resolver: Resolver) {
    around = interceptor;
    behaves = resolver;
    const first = await mutate(ref);
    const ran = calls[ref];
    around = 'once';
    behaves = 'pays';
    const retried = await mutate(ref);
    return {
      first: shape(first.body),
      rows: await rows(ref),
      ran,
      retried: shape(retried.body),
      ranInAll: calls[ref],
    };
  }

  const paid = (ref: string, ran: number) => ({
    first: { ref, status: 'captured' },
    rows: 1,
    ran,
    retried: { ref, status: 'captured' },
    ranInAll: ran,
  });

  it('control: the chain run once: the payment, replayed', async () => {
    const ref = `${driver}-once`;
    expect(await run(ref, 'once', 'pays')).toEqual(paid(ref, 1));
  });

  it('an audit on the side: the resolver runs once, and the client gets its payment', async () => {
    const ref = `${driver}-audit`;
    expect(await run(ref, 'audit', 'pays')).toEqual(paid(ref, 1));
  });

  it('the app’s retry after a 502 blip runs the resolver again: its payment is the answer', async () => {
    const ref = `${driver}-retry`;
    expect(await run(ref, 'retry', 'blip-once')).toEqual(paid(ref, 2));
  });

  it('the app’s retry after a delay runs the resolver again: its payment is the answer', async () => {
    // Told from an audit that subscribed late by where the error went: the retry's operator
    // took it, where an audit's error goes on to GraphQL (adversary34-late-audit-takes-claim).
    const ref = `${driver}-retry-later`;
    expect(await run(ref, 'retry-later', 'blip-once')).toEqual(paid(ref, 2));
  });

  it.each(['once', 'retry', 'audit'] as const)(
    'a resolver’s final error around %s: stored as the answer goes out, replayed, nothing kept',
    async (interceptor) => {
      const ref = `${driver}-declined-${interceptor}`;
      expect(await run(ref, interceptor, 'declines')).toEqual({
        first: 'card declined',
        rows: 0,
        ran: interceptor === 'retry' ? 2 : 1,
        retried: 'card declined',
        ranInAll: interceptor === 'retry' ? 2 : 1,
      });
    },
  );

  it('an error that cannot be stored as the answer goes out is answered so, not as the resolver’s', async () => {
    const ref = `${driver}-store-down`;
    around = 'once';
    behaves = 'declines-store-down';
    const first = await mutate(ref);
    await admin.query('ROLLBACK');
    expect(shape(first.body)).toBe('store_unavailable');
    expect(await rows(ref)).toBe(0);
  });
});
