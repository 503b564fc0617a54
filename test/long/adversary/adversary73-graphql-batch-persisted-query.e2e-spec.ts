import { createHash } from 'node:crypto';
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
 * Adversary 73: in an Apollo batch (`allowBatchedHttpRequests`) where one entry is sent as an
 * automatic persisted query (its hash only, no `query`: Apollo Server 4's APQ, on by default)
 * and another entry of the same document carries its query text, the hash-only entry's field
 * is keyed by the OTHER entry's key argument and fingerprinted by its arguments. The two calls
 * become one record: one payment runs under the other's key, the other is answered 409 or
 * replayed the first's payment (never made).
 *
 * The app: the docs' key in an argument (`@Idempotent({ keyFrom: { arg: 'idempotencyKey' } })`)
 * on Apollo (Express), batching on. The client (Apollo Client's `createPersistedQueryLink` +
 * `BatchHttpLink`) sends a document by its hash once the server knows it, and with its text
 * when it retries a `PersistedQueryNotFound` or registers it; both kinds can share a batch.
 * Here: the document registered by one call (query + hash), then a batch of two calls of it,
 * different keys and amounts: [ { hash only, key A, 101 }, { query + hash, key B, 202 } ].
 *
 * Why: `operationBody` (lib/graphql/read-field.ts) picks a batch entry with no `operationId`
 * in the context (Apollo sets none) as "the one entry whose query is the operation's text":
 * `body.filter(entry => entry.query === info.operation.loc.source.body)`. Apollo parses the
 * hash-only entry from its APQ cache, the same text, so for BOTH fields the one entry with
 * that text is entry 1: entry 0's field reads entry 1's variables (`sentVariables`), its key
 * (`readField`: `rawKey(args[arg])`) and fingerprint included. Entries without a query text are
 * not counted, so "one entry" is not "this operation's entry".
 *
 * Expected (docs/guides/graphql.md, "Keys"): "A key in an argument ... names its call,
 * wherever it appears ... Batched operations ... give each call its own key in an argument
 * there." Each call runs once under its own key: rows 101 and 202, each answer its own.
 *
 * Control: the same batch with both entries carrying the query text (identical texts,
 * different variables) runs both calls under their own keys: passes.
 *
 * Severity: high (a call is answered another call's result under another key: a payment of
 * 101 never made and reported made as the 202 one, or 409 for ever on its retry meeting key B).
 *
 * Fails now: entry 0 is answered 409 key_in_progress (keyed 'adv73-apq-b', entry 1's key, held
 * by entry 1's call), and no row of 101 under key A; the control passes.
 *
 * Fixed: a batch's entry is told by Mercurius' `operationId` only (with its `operationsCount`),
 * never by its text: elsewhere (Apollo) the executor's variables, graphql-js's, are read
 * (`operationBody`, lib/graphql/read-field.ts).
 */
let pool: Pool;

@ObjectType()
class Payment {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;

  @Field()
  key!: string;
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Payment)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  async pay(
    @Args('idempotencyKey') idempotencyKey: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<Payment> {
    // A little work, so that the two calls of the batch overlap as in production.
    await new Promise((resolve) => setTimeout(resolve, 150));
    const { rows } = await pool.query<Payment>(
      'INSERT INTO payments (amount, key) VALUES ($1, $2) RETURNING id, amount, key',
      [amount, idempotencyKey],
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
  providers: [PaymentsResolver],
})
class PaymentsModule {}

const QUERY =
  'mutation Pay($idempotencyKey: String!, $amount: Int!) ' +
  '{ pay(idempotencyKey: $idempotencyKey, amount: $amount) { id amount key } }';
const persistedQuery = {
  version: 1,
  sha256Hash: createHash('sha256').update(QUERY).digest('hex'),
};

describe('adversary 73: an Apollo batch mixing a persisted (hash-only) entry and a full one', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv73_batch_apq', {
      module: PaymentsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE payments (id serial PRIMARY KEY, amount int NOT NULL, key text NOT NULL)',
        );
      },
    });
    // The document registered (query + hash), as the persisted-query link does on a miss.
    const registered = await post({
      query: QUERY,
      extensions: { persistedQuery },
      variables: { idempotencyKey: 'adv73-apq-register', amount: 1 },
    });
    if (
      (registered.body as { data?: { pay?: { key?: string } } }).data?.pay?.key !==
      'adv73-apq-register'
    ) {
      throw new Error(`the document was not registered: ${JSON.stringify(registered.body)}`);
    }
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (body: unknown) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('apollo-require-preflight', 'true')
      .timeout(10_000)
      .send(JSON.stringify(body));

  const rows = async () =>
    (
      await fixture.admin.query<{ amount: number; key: string }>(
        "SELECT amount, key FROM payments WHERE key LIKE 'adv73-apq-%' AND amount > 1 ORDER BY amount",
      )
    ).rows;

  const entry = (key: string, amount: number, withText: boolean) => ({
    ...(withText ? { query: QUERY } : {}),
    extensions: { persistedQuery },
    variables: { idempotencyKey: key, amount },
  });

  it('control: both entries with the query text, each call under its own key', async () => {
    const res = await post([entry('adv73-apq-c1', 11, true), entry('adv73-apq-c2', 22, true)]);
    expect(res.body).toEqual([
      { data: { pay: { id: expect.any(Number), amount: 11, key: 'adv73-apq-c1' } } },
      { data: { pay: { id: expect.any(Number), amount: 22, key: 'adv73-apq-c2' } } },
    ]);
  });

  it('a hash-only entry and a full entry: each call under its own key', async () => {
    const res = await post([entry('adv73-apq-a', 101, false), entry('adv73-apq-b', 202, true)]);
    // Fails: entry 0 keyed 'adv73-apq-b' (entry 1's variables): 409 in progress, or the
    // other call's payment.
    expect(res.body).toEqual([
      { data: { pay: { id: expect.any(Number), amount: 101, key: 'adv73-apq-a' } } },
      { data: { pay: { id: expect.any(Number), amount: 202, key: 'adv73-apq-b' } } },
    ]);
    expect(await rows()).toEqual(
      expect.arrayContaining([
        { amount: 101, key: 'adv73-apq-a' },
        { amount: 202, key: 'adv73-apq-b' },
      ]),
    );
  });
});
