import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  type FieldMiddleware,
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
 * Adversary 79 (graphql): the same key twice in one operation, on a mutation whose answer has
 * a field behind field middleware: the second call waits a third of the lease (1.7 s at the default 5 s lease, up to 10 s)
 * and then
 * answers that field `field_output_pending`, where the first call answered it (and the docs
 * say a key met twice in one operation is replayed).
 *
 * The app: `Order { id tags: [String!] }`, `tags` behind Nest's field middleware `upper`
 * (`(await next()).map((t) => t.toUpperCase())`); `createOrder(idempotencyKey: String!)`
 * with `@Idempotent({ keyFrom: { arg: 'idempotencyKey' } })` ("one key per call, several
 * calls in one operation"); Apollo on Express. The client sends
 * `mutation { a: createOrder(idempotencyKey: "k") { id tags } b: createOrder(idempotencyKey:
 * "k") { id tags } }` (a form that merges two retries of one request, or a client that sends
 * the same pending mutation twice in a batch document).
 *
 * Why: `a` commits its answer with the outputs pending (run-field.ts, `awaitsOutputs`) and
 * `noteCompleting` a promise that only the operation's answer hook (`storeOutputsOf`, Apollo's
 * `willSendResponse`) resolves. Mutations run one after the other, so `b` runs before that
 * hook: `withOutputs` (intercept-field.ts) races `completingFor(id)` against `storeWaitMs`
 * (1.7 s here), then polls the store until the same deadline, and gives up: `noteOutputsOf` notes
 * the answer `pending`, and `b.tags` throws `field_output_pending`. Only then does the hook
 * run and complete the stored answer. Nothing in `withOutputs` sees that the completion it
 * waits for is its own operation's (the same GraphQL context).
 *
 * Docs (docs/guides/graphql.md): "A claim of the same key made in the process meanwhile (the
 * key twice in one operation) stores it first, then replays it" (said for a stored error);
 * "every retry gets the first answer"; and `field_output_pending` is documented only for "the
 * first call's process stopped between the two writes, or its client left before the answer
 * went out".
 *
 * Controls (pass): the same operation on `createNote` (same shape, no field middleware)
 * answers `b` as `a` at once; a later request with the key replays `tags` as stored.
 *
 * Severity: medium (a wrong error and a stall (up to 10 s) of the whole operation, every time, for a
 * documented usage: several keyed calls in one operation; the work itself stays done once).
 *
 * Fails now: the answer takes ~1.8 s, and `b.tags` is null with the error `field_output_pending`
 * (expected `b` equal to `a`, no errors, at once).
 *
 * Suggested fix: in `withOutputs`, when the pending answer is being completed by an answer
 * hook of this same operation (note the GraphQL context with `noteCompleting`), answer the
 * middleware fields from the first call's noted paths at the hook instead of waiting, e.g.
 * note the replay as "same operation" and let `storeOutputsOf` fill the replayed fields' data
 * from the first's outputs (or run the middleware on the replay's copy of the first value,
 * as one operation, like a stored error is met as stored).
 *
 * Fixed: the completion of a pending answer is noted with the GraphQL context of the
 * operation whose answer hook completes it (`noteCompleting`, lib/graphql/output-paths.ts,
 * from run-field.ts); a replay in that same operation (`completedInOperation`,
 * intercept-field.ts) waits for nothing, and its middleware fields answer what the first
 * answer's middleware gave at the same place (`noteFirstResult`, kind `shared` of `outputAt`;
 * middleware-outputs.ts): the middleware does not run again.
 */
let pool: Pool;

/** Nest's field middleware: the tags in capitals. */
const upper: FieldMiddleware = async (_ctx, next) => {
  const tags = (await next()) as string[] | null;
  return tags?.map((tag) => tag.toUpperCase()) ?? null;
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { nullable: true, middleware: [upper] })
  tags?: string[];
}

@ObjectType()
class Note {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { nullable: true })
  tags?: string[];
}

async function insert(): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  return rows[0].id;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  async createOrder(@Args('idempotencyKey') _key: string): Promise<Order> {
    return { id: await insert(), tags: ['red', 'green'] };
  }

  /** The control: the same mutation, no field middleware under it. */
  @Mutation(() => Note)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  async createNote(@Args('idempotencyKey') _key: string): Promise<Note> {
    return { id: await insert(), tags: ['red', 'green'] };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 79: the same key twice in one operation, a middleware field under it', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv79_gql_mw_key_twice', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(30_000)
      .send(JSON.stringify({ query }));

  const twice = (field: string, key: string) =>
    `mutation { a: ${field}(idempotencyKey: "${key}") { id tags } ` +
    `b: ${field}(idempotencyKey: "${key}") { id tags } }`;

  it('control: no middleware under it, b replays a at once', async () => {
    const began = performance.now();
    const answer = await post(twice('createNote', 'adv79-twice-note'));
    const tookMs = performance.now() - began;
    expect(answer.body.errors).toBeUndefined();
    expect(answer.body.data.b).toEqual(answer.body.data.a);
    expect(answer.body.data.a).toEqual({ id: expect.any(Number), tags: ['red', 'green'] });
    expect(tookMs).toBeLessThan(1_500);
  }, 30_000);

  it('the middleware field: b replays a at once', async () => {
    const began = performance.now();
    const answer = await post(twice('createOrder', 'adv79-twice-order'));
    const tookMs = performance.now() - began;
    expect(answer.body.data.a).toEqual({ id: expect.any(Number), tags: ['RED', 'GREEN'] });
    // Fails: b.tags is null with field_output_pending, after ~1.7 s.
    expect(answer.body.errors).toBeUndefined();
    expect(answer.body.data.b).toEqual(answer.body.data.a);
    expect(tookMs).toBeLessThan(1_500);
    // The stored answer was completed afterwards: a later request replays it whole.
    const later = await post(twice('createOrder', 'adv79-twice-order'));
    expect(later.body.data).toEqual({ a: answer.body.data.a, b: answer.body.data.a });
  }, 30_000);
});
