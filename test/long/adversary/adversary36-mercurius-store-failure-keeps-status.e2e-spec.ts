import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');
const { default: mercurius } = await import('mercurius');

/**
 * Adversary 36: round 35b's fix (an error whose store fails at the answer takes back the HTTP
 * status and headers it set) is Apollo's only. On Mercurius the resolver's error has set the
 * answer's status before the library's hook runs, and nothing takes it back.
 *
 * App: Mercurius (Fastify), its default `errorFormatter`; `@Idempotent({ keyFrom: { arg:
 * 'ref' } })` on `pay: Payment!` (non-null), `databaseTimeoutMs: 500`. `pay` inserts, then
 * declines with Mercurius' documented way to set the answer's status:
 * `new mercurius.ErrorWithProps('card declined', { code: 'PAYMENT_DECLINED' }, 402)`, while the
 * keys' table is unavailable (locked, as the library's graphql-field-runs "store-down" test
 * and adversary35b-store-failure-keeps-http do).
 * What happens: Mercurius runs `errorFormatter` BEFORE the `onResolution` hook
 * (mercurius/index.js `maybeFormatErrors`: `errorFormatter(execution, context)` then
 * `reply.code(statusCode)`, then `onResolutionHandler`): the default formatter gives the
 * answer the error's `statusCode` (402; no data, one error). The library's hook then stores
 * the waiting error (lib/graphql/replay-marker.ts:108-118, lib/graphql/stored-at-answer.ts:
 * 126-141), which fails, and replaces the entry with `store_unavailable` (stored-at-answer.ts:
 * 193-217) in the body only: the HTTP status stays 402, set by an error that was never
 * stored (the Apollo hook takes it back, replay-marker.ts:86-94; the Mercurius one does not).
 * Expected: the answer carries nothing of an error that was not stored: not the decline's 402
 * (the status a `store_unavailable` thrown by the library gets on this app, here 200).
 * Control: the store is up: 402 and PAYMENT_DECLINED, and the retry replays both.
 * Severity: low (a client or gateway acting on the status, 402 "payment declined", acts on an
 * answer that was not stored; the body says store_unavailable, retry).
 *
 * NOT FIXED (a stated limit, in issue 27's note): Mercurius computes the answer's status in
 * its `errorFormatter`, before `onResolution`, where the library stores a field's error: the
 * body says `store_unavailable`, the status stays the error's. The breaking case is skipped;
 * its control runs.
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

  @Mutation(() => Payment)
  @Idempotent({ keyFrom: { arg: 'ref' } })
  async pay(@Args('ref') ref: string): Promise<Payment> {
    calls++;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    if (storeDown) {
      // The keys' table unavailable from now until the test releases it.
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
    }
    throw new mercurius.ErrorWithProps('card declined', { code: 'PAYMENT_DECLINED' }, 402);
  }
}

describe('adversary 36: a failed store keeps the unstored error HTTP status, on mercurius', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 500 }),
        }),
        GraphQLModule.forRoot<MercuriusDriverConfig>({
          driver: MercuriusDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      providers: [PaymentsResolver],
    })
    class PaymentsModule {}
    fixture = await startPoolApp('adv36_merc_status', {
      module: PaymentsModule,
      adapter: 'fastify',
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
    return { status: answer.status, code: body.errors?.[0]?.extensions?.code };
  };

  it('control: the store is up: 402 and the decline, replayed as they were', async () => {
    storeDown = false;
    calls = 0;
    const first = await send('status-control');
    const retried = await send('status-control');
    const declined = { status: 402, code: 'PAYMENT_DECLINED' };
    expect({ first, retried, calls }).toEqual({ first: declined, retried: declined, calls: 1 });
  }, 20_000);

  it.skip("the store fails: the answer must not keep the unstored error's status", async () => {
    storeDown = true;
    calls = 0;
    const first = await send('status-store-down');
    await admin.query('ROLLBACK');
    storeDown = false;
    expect(first).toEqual({ status: 200, code: 'store_unavailable' });
  }, 20_000);
});
