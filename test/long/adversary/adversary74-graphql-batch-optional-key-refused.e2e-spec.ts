import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
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
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 74: a mutation whose key is optional (`@Idempotent({ required: false })`) is
 * refused, `key_invalid` (400), in every batch of two or more operations that sends no key
 * at all: Apollo Client's `BatchHttpLink` (or any batching client) can never run it, though
 * without a key it is documented to run as if it were not idempotent.
 *
 * The app: the docs' `createTransfer` with the key in the `Idempotency-Key` header, optional
 * (`@Idempotent({ required: false })`: clients that send a key get exactly once, the others
 * run as before), Apollo on Express with batching on (`allowBatchedHttpRequests: true`).
 * A batch of two calls, no `Idempotency-Key` header.
 *
 * Why: `readField` (lib/graphql/read-field.ts) refuses a key of the whole request in a batch
 * of more than one operation (`BATCH_SHARED`) before it reads the key: whether the request
 * holds one or not. `readKey` would have found none, and answered `keyless` (run without
 * one) for an optional key.
 *
 * Expected (docs/reference/options.md): "`required` (route) | `true` | a request without a
 * key gets 400; when `false`, it runs as if the route were not idempotent". The batch's
 * refusal is for "a key of the whole operation" that "cannot name each one's mutation"
 * (docs/guides/graphql.md, "One record per mutation field"): here there is no key to share.
 * Each call runs, once.
 *
 * Control: the same two calls sent one per request without a key: each runs; passes.
 *
 * Severity: medium (a permanent false refusal: every batched call of such a mutation from a
 * client that sends no key answers 400, nothing runs).
 *
 * Suggested fix: read the key first (`route.key.read(request)`): refuse the batch only when a
 * key is there to be shared; none on an optional key is `keyless`, as for a single operation.
 *
 * Fixed: `readField` (lib/graphql/read-field.ts) refuses a batch (`BATCH_SHARED`) only when
 * `batchHoldsKey` finds a key in it (the request's, or any operation's body read alone);
 * with none, `readKey` answers as for one operation: `keyless` on an optional key,
 * `key_missing` on a required one.
 */
let pool: Pool;

@ObjectType()
class Transfer {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;
}

@Resolver(() => Transfer)
class TransfersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Transfer)
  @Idempotent({ required: false })
  async createTransfer(@Args('amount', { type: () => Int }) amount: number): Promise<Transfer> {
    const { rows } = await pool.query<Transfer>(
      'INSERT INTO transfers (amount) VALUES ($1) RETURNING id, amount',
      [amount],
    );
    return rows[0];
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      allowBatchedHttpRequests: true,
    }),
  ],
  providers: [TransfersResolver],
})
class TransfersModule {}

const QUERY = 'mutation T($amount: Int!) { createTransfer(amount: $amount) { amount } }';

describe('adversary 74: a batch without a key, on a mutation whose key is optional', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv74_gql_batch_optional', {
      module: TransfersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, amount int NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (body: unknown) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(10_000)
      .send(JSON.stringify(body));

  const amounts = async () =>
    (await pool.query<{ amount: number }>('SELECT amount FROM transfers ORDER BY id')).rows.map(
      (row) => row.amount,
    );

  it('control: the two calls one per request, without a key, each run', async () => {
    const first = await post({ query: QUERY, variables: { amount: 1 } });
    const second = await post({ query: QUERY, variables: { amount: 2 } });
    expect(first.body).toEqual({ data: { createTransfer: { amount: 1 } } });
    expect(second.body).toEqual({ data: { createTransfer: { amount: 2 } } });
    expect(await amounts()).toEqual([1, 2]);
  });

  it('the two calls in one batch, without a key, each run', async () => {
    const res = await post([
      { query: QUERY, variables: { amount: 11 } },
      { query: QUERY, variables: { amount: 22 } },
    ]);
    // Fails: each entry { data: null, errors: [{ code: 'key_invalid', 'it is shared by every
    // operation of a batched request ...' }] }, no row.
    expect(res.body).toEqual([
      { data: { createTransfer: { amount: 11 } } },
      { data: { createTransfer: { amount: 22 } } },
    ]);
    // Apollo runs a batch's operations at once: their rows commit in either order.
    expect((await amounts()).sort((a, b) => a - b)).toEqual([1, 2, 11, 22]);
  });
});
