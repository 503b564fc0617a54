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
 * Adversary 73: on Apollo, an app whose GraphQL context has a field of its own named
 * `operationId` (a number: here the client's operation number for tracing, from its
 * `x-operation-id` header) has every call of a batch keyed by the variables of the batch
 * entry at that index: two calls with their own keys become one record, one runs under the
 * other's key and the other is answered 409 or replayed its payment.
 *
 * The app: the docs' key in an argument (`@Idempotent({ keyFrom: { arg: 'idempotencyKey' } })`)
 * on Apollo (Express), batching on (`allowBatchedHttpRequests`), and a context of its own:
 * `context: ({ req }) => ({ req, operationId: Number(req.headers['x-operation-id'] ?? -1) })`.
 * A batch of two calls of one document, different keys and amounts, header `x-operation-id: 1`.
 *
 * Why: `operationBody` (lib/graphql/read-field.ts) takes the context's `operationId`, if an
 * integer, as Mercurius' index of the entry (`body[index]`) on any server: Apollo sets none,
 * so the app's own field is read as one. Both fields read entry 1's variables
 * (`sentVariables`), key (`readField`: `rawKey(args[arg])`) and fingerprint included. Nothing
 * checks the context is Mercurius' or the entry is the operation's (its query text).
 *
 * Expected (docs/guides/graphql.md, "Keys"): "A key in an argument ... names its call,
 * wherever it appears ... Batched operations ... give each call its own key in an argument
 * there." Each call runs once under its own key: rows 101 and 202, each answer its own.
 *
 * Control: the same batch without the header (the context's `operationId` not an integer):
 * each call under its own key, passes.
 *
 * Severity: medium (high in effect: a call answered under another call's key, its payment
 * never made; needs an app context field named `operationId` holding an integer on Apollo).
 *
 * Fails now: both calls keyed 'adv73-opid-b' (entry 1's key): one runs under it, the other
 * (here entry 1) is answered 409 key_in_progress; the control passes.
 *
 * Fixed: `operationId` is taken for Mercurius' only with its `operationsCount`, the batch's
 * length (`operationBody`, lib/graphql/read-field.ts).
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
      context: ({ req }: { req: { headers: Record<string, string | undefined> } }) => ({
        req,
        operationId: Number(req.headers['x-operation-id'] ?? -1),
      }),
    }),
  ],
  providers: [PaymentsResolver],
})
class PaymentsModule {}

const QUERY =
  'mutation Pay($idempotencyKey: String!, $amount: Int!) ' +
  '{ pay(idempotencyKey: $idempotencyKey, amount: $amount) { id amount key } }';

describe('adversary 73: an Apollo batch under an app context with its own operationId', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv73_batch_opid', {
      module: PaymentsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE payments (id serial PRIMARY KEY, amount int NOT NULL, key text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (body: unknown, operation?: string) => {
    const sent = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(10_000);
    if (operation !== undefined) sent.set('x-operation-id', operation);
    return sent.send(JSON.stringify(body));
  };

  const entry = (key: string, amount: number) => ({
    query: QUERY,
    variables: { idempotencyKey: key, amount },
  });

  it('control: no operationId of the app, each call under its own key', async () => {
    const res = await post([entry('adv73-opid-c1', 11), entry('adv73-opid-c2', 22)]);
    expect(res.body).toEqual([
      { data: { pay: { id: expect.any(Number), amount: 11, key: 'adv73-opid-c1' } } },
      { data: { pay: { id: expect.any(Number), amount: 22, key: 'adv73-opid-c2' } } },
    ]);
  });

  it("the app's operationId 1 in its context: each call under its own key", async () => {
    const res = await post([entry('adv73-opid-a', 101), entry('adv73-opid-b', 202)], '1');
    // Fails: both keyed 'adv73-opid-b' (entry 1's variables): one answered 409 in progress.
    expect(res.body).toEqual([
      { data: { pay: { id: expect.any(Number), amount: 101, key: 'adv73-opid-a' } } },
      { data: { pay: { id: expect.any(Number), amount: 202, key: 'adv73-opid-b' } } },
    ]);
  });
});
