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
 * Adversary, round 43b: Apollo Client's `BatchHttpLink` sends a mutation with its own
 * `Idempotency-Key` header as a batch of one, and the library refuses it for ever.
 *
 * The app: the docs' GraphQL setup on Apollo (Express), with Apollo Server's batching on
 * (`allowBatchedHttpRequests: true`, what `BatchHttpLink` needs), and the key in the
 * `Idempotency-Key` header (the default `keyFrom`). The client is Apollo Client with
 * `BatchHttpLink` as its terminating link, the header set per mutation through the operation's
 * context (`client.mutate({ mutation, context: { headers: { 'Idempotency-Key': key } } })`,
 * the documented way to set a request's headers). `BatchHttpLink`'s default `batchKey` is the
 * URI and the context's `headers`, `fetchOptions`, `credentials` and `http`
 * (apollo-client src/link/batch-http/BaseBatchHttpLink.ts, `batchKey`): two mutations with
 * different keys never share a batch, so each one goes out alone, and always as a JSON array
 * (`options.body = JSON.stringify(loadedBody)`, one element).
 *
 * What happens: `readField` (lib/graphql/read-field.ts:64-72) refuses a key of the whole
 * request whenever the body is an array ("it is shared by every operation of a batched
 * request ... so it cannot name each one's mutation"), whatever its length. A batch of one
 * operation names one mutation, as the same operation outside an array does; nothing is
 * ambiguous. The mutation answers `key_invalid` (400, not retryable) on every try: the app
 * cannot run it under a key at all with this client, though nothing in the request is wrong.
 *
 * Expected: a batch of one is taken as the operation itself: the mutation runs once, its
 * retry (again a batch of one) replays it; a batch of two or more is refused as now.
 *
 * Control: the same operation sent alone (`HttpLink`, a JSON object): runs once, the retry
 * replays it. Passes.
 *
 * Severity: medium (a legit idiom refused: an ordinary client configuration, refused with a
 * permanent 400 whose advice, "send the operations one per request", the request already
 * follows).
 */
let pool: Pool;

@ObjectType()
class Payment {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Payment)
  @Idempotent()
  async pay(@Args('amount', { type: () => Int }) amount: number): Promise<Payment> {
    const { rows } = await pool.query<Payment>(
      'INSERT INTO payments (amount) VALUES ($1) RETURNING id, amount',
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
  providers: [PaymentsResolver],
})
class PaymentsModule {}

describe('adversary 43b: a batch of one operation under a header key (Apollo BatchHttpLink)', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv43b_batch_of_one', {
      module: PaymentsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, amount int NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const rows = async (amount: number) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM payments WHERE amount = $1', [amount]))
        .rows[0].count,
    );

  it.each([
    ['control: the operation alone (HttpLink)', false, 43],
    ['the operation in a batch of one (BatchHttpLink)', true, 44],
  ] as const)('%s: runs once, the retry replays it', async (_name, batched, amount) => {
    const operation = { query: `mutation Pay { pay(amount: ${amount}) { id amount } }` };
    const send = () =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', `adv43b-batch-${amount}`)
        .set('Content-Type', 'application/json')
        .timeout(5_000)
        .send(JSON.stringify(batched ? [operation] : operation));
    /** The operation's answer, alone or the batch's one entry. */
    const answerOf = (body: unknown) =>
      (batched ? (body as unknown[])[0] : body) as Record<string, unknown>;
    const first = answerOf((await send()).body);
    const retried = answerOf((await send()).body);
    // Received (batched): both { errors: [{ message: 'The Idempotency-Key header is invalid:
    // it is shared by every operation of a batched request ...', extensions: { code:
    // 'key_invalid', status: 400 } }], data: null }, no row.
    expect(first).toEqual({ data: { pay: { id: expect.any(Number), amount } } });
    expect(retried).toEqual({ ...first, extensions: { idempotency: { replayed: ['pay'] } } });
    expect(await rows(amount)).toBe(1);
  });
});
