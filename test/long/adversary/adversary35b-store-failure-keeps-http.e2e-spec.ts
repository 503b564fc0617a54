import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { GraphQLError } from 'graphql';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 35b: a resolver's error whose store fails at the answer is replaced by
 * `store_unavailable` in the answer's `errors`, but the HTTP head Apollo took from that error's
 * `extensions.http` stays: the client gets the error's own header (`x-decline-code: 51`; a
 * `Retry-After` the same), for an error that was never stored and that its retry will not get.
 *
 * App: Apollo (Express); `@Idempotent({ keyFrom: { arg: 'ref' } })` on `pay` (nullable),
 * `databaseTimeoutMs: 500`. `pay` inserts, then declines with Apollo Server's documented way
 * to set the answer's status and headers: `new GraphQLError('card declined', { extensions:
 * { code: 'PAYMENT_DECLINED', http: { status: 402, headers: Map { x-decline-code: 51 } } } })`,
 * while the keys' table is unavailable (locked, as the library's own graphql-field-runs
 * "store-down" test does).
 * What happens: Apollo formats the errors and merges each error's `extensions.http` into the
 * answer's HTTP head (@apollo/server requestPipeline.js: `mergeHTTPGraphQLHead(...,
 * httpFromErrors)`) before `willSendResponse`. The library's hook then stores the waiting
 * error (lib/graphql/replay-marker.ts:79-87, lib/graphql/stored-at-answer.ts:99-113), which
 * fails, and replaces the error's entry with `store_unavailable`
 * (stored-at-answer.ts:146-172) in the body only: `response.http` (its headers; the status
 * here stays 200 under Nest's driver) is left as the resolver's error set it.
 * Expected: the answer carries nothing of an error that was not stored (the library's own
 * errors keep the driver's status: docs/guides/graphql.md "The library's answers as GraphQL
 * errors"): without the unstored error's headers.
 * Control: the store is up: the header, and the retry replays it (as the guide promises).
 * Severity: low (a client or gateway that acts on the error's headers, a `Retry-After` or a
 * decline code, acts on an answer that was not stored; the body says "not stored, retry").
 */
let pool: Pool;
let admin: Client;
let storeDown = false;
let calls = 0;

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
  @Idempotent({ keyFrom: { arg: 'ref' } })
  async pay(@Args('ref') ref: string): Promise<Payment> {
    calls++;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    if (storeDown) {
      // The keys' table unavailable from now until the test releases it.
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
    }
    throw new GraphQLError('card declined', {
      extensions: {
        code: 'PAYMENT_DECLINED',
        http: { status: 402, headers: new Map([['x-decline-code', '51']]) },
      },
    });
  }
}

describe('adversary 35b: a failed store keeps the unstored error HTTP headers, on apollo', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 500 }),
        }),
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      providers: [PaymentsResolver],
    })
    class PaymentsModule {}
    fixture = await startPoolApp('adv35b_http_head', {
      module: PaymentsModule,
      adapter: 'express',
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
      .timeout(10_000)
      .send({ query: `mutation { pay(ref: "${ref}") { ref } }` });
    const body = answer.body as {
      errors?: { message: string; extensions?: { code?: unknown } }[];
    };
    return {
      status: answer.status,
      declineCode: answer.headers['x-decline-code'] as string | undefined,
      code: body.errors?.[0]?.extensions?.code,
    };
  };

  it('control: the store is up: the error header, replayed as it was', async () => {
    storeDown = false;
    calls = 0;
    const first = await send('http-control');
    const retried = await send('http-control');
    const declined = { status: 200, declineCode: '51', code: 'PAYMENT_DECLINED' };
    expect({ first, retried, calls }).toEqual({ first: declined, retried: declined, calls: 1 });
  }, 20_000);

  it("the store fails: the answer must not keep the unstored error's headers", async () => {
    storeDown = true;
    calls = 0;
    const first = await send('http-store-down');
    await admin.query('ROLLBACK');
    storeDown = false;
    expect(first).toEqual({ status: 200, declineCode: undefined, code: 'store_unavailable' });
  }, 20_000);
});
