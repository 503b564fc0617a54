import { jest } from '@jest/globals';
import { BadRequestException, Module } from '@nestjs/common';
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
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 34: a field's error whose store, started by the fallback timer, fails: the client
 * is given the resolver's error, which is never stored, and a retry runs the resolver again.
 *
 * App: Apollo (Express) and Mercurius (Fastify); `@Idempotent({ leaseMs: 3000 })` on `pay`
 * (storeWaitMs = 1000), `databaseTimeoutMs: 500`. One operation, two serial mutation fields:
 * `a: pay(...)` declines (a BadRequestException: a final error) while the keys' table is
 * unavailable (locked, as the library's own test graphql-field-runs "store-down" does), then
 * `b: slow(ms: 1700)`, an ordinary mutation that takes longer than storeWaitMs (`pay` is
 * nullable, so that GraphQL goes on to `b` after `a` failed).
 *
 * What happens:
 *  - lib/graphql/run-field.ts:244-254 (`failed()`): the error waits in a PendingAnswer, its
 *    fallback timer at storeWaitMs (run-field.ts:47; stored-at-answer.ts:39).
 *  - The operation is still running field `b` when the timer fires: `start()`
 *    (stored-at-answer.ts:46-53) deletes the entry from the operation's pending set *before*
 *    the store settles, and nobody looks at the store's result (`void this.start()`, :39).
 *  - The store fails (databaseTimeoutMs). When the answer goes out, `storeAnswersOf`
 *    (stored-at-answer.ts:94-107; replay-marker.ts:78 / :98) finds the set empty: the
 *    answer carries the resolver's "card declined", not `store_unavailable`, and does not
 *    even wait for the store in flight.
 *  - The key stays `started`: once the lease is over, a retry takes it over and runs the
 *    resolver again (it pays): the client was told "declined", its retry charges.
 * Expected: as the design says (brief; stored-at-answer.ts header, graphql-field-runs
 * "store-down"), an error that could not be stored is answered `store_unavailable`; the
 * answer must not go out before a started store settled.
 * Control: the same operation without the slow field (the answer goes out before the
 * timer): `store_unavailable`, as designed.
 * Severity: high (an answer the client got that a retry does not replay; the resolver runs
 * twice for one key). Needs the store to fail while a later field of the operation runs past
 * storeWaitMs (any database hiccup during a slow operation, or a lease small enough).
 */
let pool: Pool;
let admin: Client;
let declining = true;
let calls = 0;

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

  @Mutation(() => Payment, { nullable: true })
  @Idempotent({ keyFrom: { arg: 'ref' }, leaseMs: 3000 })
  async pay(@Args('ref') ref: string) {
    calls++;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    if (declining) {
      // The keys' table unavailable from now until the test releases it.
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
      throw new BadRequestException('card declined');
    }
    return { ref, status: 'captured' };
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
  'adversary 34: a timer-started store that fails, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({
            useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 500 }),
          }),
          graphqlModule(driver),
        ],
        providers: [PaymentsResolver],
      })
      class PaymentsModule {}
      fixture = await startPoolApp(`adv34_timer_${driver}`, {
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

    const mutate = (ref: string, slowMs?: number) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .timeout(10_000)
        .send({
          query: slowMs
            ? `mutation { a: pay(ref: "${ref}") { ref status } b: slow(ms: ${slowMs}) }`
            : `mutation { a: pay(ref: "${ref}") { ref status } }`,
        });

    const shape = (body: unknown) => {
      const { data, errors } = body as {
        data: { a?: unknown } | null;
        errors?: { message?: string; path?: unknown[]; extensions?: { code?: unknown } }[];
      };
      if (data?.a) return data.a;
      const error = errors?.find((entry) => entry.path?.[0] === 'a');
      const code = error?.extensions?.code;
      return typeof code === 'string' && /^(key|store)_/.test(code) ? code : error?.message;
    };

    const keyState = async (ref: string) =>
      (
        await fixture.admin.query<{ state: string }>(
          'SELECT state FROM idempotency_keys WHERE key LIKE $1',
          [`%${ref}%`],
        )
      ).rows[0]?.state;

    async function firstAnswer(ref: string, slowMs?: number) {
      declining = true;
      calls = 0;
      const first = await mutate(ref, slowMs);
      await admin.query('ROLLBACK');
      declining = false;
      return shape(first.body);
    }

    it('control: the answer goes out before the timer: store_unavailable, as designed', async () => {
      expect(await firstAnswer(`${driver}-control`)).toBe('store_unavailable');
    }, 20_000);

    it('a later field slower than storeWaitMs: the client must not get an error that was never stored', async () => {
      const ref = `${driver}-slow`;
      const first = await firstAnswer(ref, 1700);
      // What happened (the break): the client read "card declined", and the key was left started.
      const state = await keyState(ref);
      // After the lease, a retry takes the key over and runs the resolver again: it pays.
      await new Promise((resolve) => setTimeout(resolve, 3300));
      const retried = shape((await mutate(ref)).body);
      // Fixed: the answer waits for the store its timer started, and says it failed. Told
      // `store_unavailable` (nothing stored, retry), the client's retry after the lease runs
      // the resolver again, as for any answer that could not be stored: it pays, once.
      expect({ first, state, retried, calls }).toEqual({
        first: 'store_unavailable',
        state: 'started',
        retried: { ref, status: 'captured' },
        calls: 2,
      });
      // A client told "card declined" must never see its retry charge.
      expect(first === 'card declined' && retried !== 'card declined').toBe(false);
    }, 20_000);
  },
);
