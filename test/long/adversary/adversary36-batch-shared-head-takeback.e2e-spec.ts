import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
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
import { GraphQLError } from 'graphql';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 36: round 35b's fix (an error whose store fails takes back the headers of its
 * `extensions.http`) deletes them from an HTTP head that, in an Apollo batch
 * (`allowBatchedHttpRequests`), every operation of the batch shares (@apollo/server
 * httpBatching.js `sharedResponseHTTPGraphQLHead`; requestPipeline.js merges each
 * operation's errors' `extensions.http` into it). A header another operation's STORED error
 * set is taken back with it.
 *
 * App: Apollo (Express), `allowBatchedHttpRequests: true`; `@Idempotent({ keyFrom: { arg:
 * 'ref' } })` on `pay` (nullable), `databaseTimeoutMs: 500`. `pay` inserts, then declines:
 * `new GraphQLError('card declined', { extensions: { code: 'PAYMENT_DECLINED', http: {
 * headers: Map { x-decline-code: 51 } } } })`; for ref `a-*` it first locks the keys' table
 * (the store unavailable from then on). A batch: B = `mutation { pay(ref: "b-…") }` (declines
 * at once, its answer and its store done first), A = `mutation { wait(ms: 150) pay(ref:
 * "a-…") }`.
 * What happens: B's decline is stored at B's answer, and its header merged into the shared
 * head. A's decline cannot be stored: the library replaces A's entry by `store_unavailable`
 * and deletes `x-decline-code` from `response.http.headers` (lib/graphql/replay-marker.ts:
 * 88-90), the head shared with B: the client's answer has B's stored decline without the
 * header B's decline set, a header B's retry (a replay) gives back.
 * Expected: B's header stays (it belongs to an answer that was stored); A's alone is taken
 * back (here the same name: it stays, as B set it).
 * Control: the store is up: both declines, the header.
 * Severity: low (a header of a stored answer missing from the first answer only).
 */
let pool: Pool;
let admin: Client;

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

  @Mutation(() => Int)
  async wait(@Args('ms', { type: () => Int }) ms: number): Promise<number> {
    await new Promise((resolve) => setTimeout(resolve, ms));
    return ms;
  }

  @Mutation(() => Payment, { nullable: true })
  @Idempotent({ keyFrom: { arg: 'ref' } })
  async pay(@Args('ref') ref: string): Promise<Payment> {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    if (ref.startsWith('a-down')) {
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
    }
    throw new GraphQLError('card declined', {
      extensions: {
        code: 'PAYMENT_DECLINED',
        http: { headers: new Map([['x-decline-code', '51']]) },
      },
    });
  }
}

interface Answer {
  errors?: { extensions?: { code?: unknown } }[];
}

describe('adversary 36: a batch shares its HTTP head: an unstored error takes back a stored one header, on apollo', () => {
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
          allowBatchedHttpRequests: true,
        }),
      ],
      providers: [PaymentsResolver],
    })
    class PaymentsModule {}
    fixture = await startPoolApp('adv36_batch_head', {
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

  const batch = async (a: string, b: string) => {
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .timeout(10_000)
      .send([
        { query: `mutation { wait(ms: 150) pay(ref: "${a}") { ref } }` },
        { query: `mutation { pay(ref: "${b}") { ref } }` },
      ]);
    await admin.query('ROLLBACK').catch(() => undefined);
    const [first, second] = answer.body as Answer[];
    return {
      a: first.errors?.[0]?.extensions?.code,
      b: second.errors?.[0]?.extensions?.code,
      declineCode: answer.headers['x-decline-code'] as string | undefined,
    };
  };

  it('control: the store is up: both declines, the header', async () => {
    expect(await batch('a-up', 'b-up')).toEqual({
      a: 'PAYMENT_DECLINED',
      b: 'PAYMENT_DECLINED',
      declineCode: '51',
    });
  }, 20_000);

  it("A's store fails: B's stored decline must keep its header", async () => {
    const first = await batch('a-down', 'b-down');
    // B's retry alone: its stored decline, replayed with its header.
    const retried = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .timeout(10_000)
      .send({ query: 'mutation { pay(ref: "b-down") { ref } }' });
    expect({
      first,
      retried: {
        b: (retried.body as Answer).errors?.[0]?.extensions?.code,
        declineCode: retried.headers['x-decline-code'] as string | undefined,
      },
    }).toEqual({
      first: { a: 'store_unavailable', b: 'PAYMENT_DECLINED', declineCode: '51' },
      retried: { b: 'PAYMENT_DECLINED', declineCode: '51' },
    });
  }, 20_000);
});
