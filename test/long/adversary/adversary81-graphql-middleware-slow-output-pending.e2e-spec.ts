import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
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
 * Adversary 81 (graphql): a retry that comes while the first call is alive, in the same
 * process, its field middleware still running (a 2.5 s call: a permissions or translation
 * service), is answered `field_output_pending` ("its process stopped, or its client left,
 * before the answer was sent ... Read this one with a query") after a third of the default
 * lease (about 1.7 s), with `createOrder: null` (the field is non-null); the first call answers
 * half a second later and its outputs are stored. Nothing stopped, nothing left.
 *
 * The app: `Order { id note: String! }`, `note` behind Nest's field middleware `translate`
 * (awaits a service: 2.5 s here); `createOrder` with `@Idempotent()` and the defaults (lease
 * 5 s, heartbeat on); Apollo on Express. The client's HTTP library times out and retries (or a
 * user double-submits) once the first call's mutation committed.
 *
 * Why: a replay meeting pending outputs waits `pendingWaitMs(finishedAgeMs, boundMs)`
 * (lib/graphql/output-paths.ts), counted from the answer's commit, and waits for the
 * completion itself only once the answer hook has begun (`noteCompleting` / `completingFor`,
 * set at the hook); while the first call's fields still resolve, in this very process (its
 * `awaitOutputs` noted, its lease renewed by the heartbeat "until its answer is written"), the
 * replay gives up at the bound and throws `outputPending` (lib/graphql/middleware-outputs.ts).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A replay that comes while the outputs
 * are pending (the first answer's other fields still resolving) waits for them, for at most
 * the time a field's error waits for its answer (a third of the lease, at most 10 s). Past
 * that (the first call's process stopped between the two writes, or its client left before the
 * answer went out, so no answer hook ran), those fields answer a GraphQL error with the code
 * `field_output_pending`". The error's words: "its process stopped, or its client left".
 *
 * Control (passes): the same with a 300 ms middleware: the retry waits and answers the output.
 *
 * Severity: medium (an honest retry gets `data: { createOrder: null }` and an error that says
 * the first call's process stopped, while it is alive and answers a moment later; a client
 * that reads null as failure retries with a new key and orders again).
 *
 * Failed (before the fix): the retry answered, after about 2 s, `createOrder: null` with
 * `field_output_pending` at `createOrder.note`; the first call answers `note: 'HELLO'` at 2.5 s.
 *
 * Suggested fix: while the first call is known alive (its `awaitOutputs` entry in this
 * process; elsewhere, its lease still renewed by the heartbeat, which runs until the answer
 * is written), keep waiting for the outputs (bounded by the lease's lapse, not by its third);
 * answer `field_output_pending` only once the first call's lease lapsed or its hook ran
 * without them.
 *
 * Fixed: a replay that meets pending outputs whose first call still resolves in this process
 * (its completion noted, `completingFor`) waits for them until the lease would lapse, counted
 * from the commit (`pendingBoundMs`, lib/graphql/output-paths.ts, beside `pendingWaitMs`; the
 * first call's own wait for its hook so bounded too, lib/graphql/run-field.ts), and asks the
 * store once more if the hook wrote nothing (`withOutputs`, lib/graphql/intercept-field.ts);
 * elsewhere (no heartbeat renews a finished key, so nothing tells the first call alive) a third
 * of the lease, as before; commit "graphql: a live first call's slow middleware waited for;
 * an app field's parent kept inside a middleware output".
 */
let pool: Pool;

/** How long the middleware's service takes. */
let serviceMs = 300;

/** Nest's field middleware that awaits a service (a translation). */
const translate: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string;
  await new Promise((resolve) => setTimeout(resolve, serviceMs));
  return value.toUpperCase();
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field({ middleware: [translate] })
  note!: string;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, note: 'hello' };
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

describe('adversary 81: a retry while a live first call’s middleware still runs', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_slow_pending', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const replayed = { idempotency: { replayed: ['createOrder'] } };

  /** The first call, and its retry once the first call's mutation committed. */
  const race = async (key: string) => {
    const query = 'mutation { createOrder { id note } }';
    // Sent now (supertest sends a request when it is awaited).
    const first = post(key, query).then((response) => response);
    for (let i = 0; i < 500; i++) {
      const { rowCount } = await pool.query(
        "SELECT 1 FROM idempotency_keys WHERE key = $1 AND state = 'done'",
        [`${key}:createOrder`],
      );
      if (rowCount) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const retry = post(key, query);
    return Promise.all([first, retry]);
  };

  it('control: a 300 ms middleware, the retry waits for its output', async () => {
    serviceMs = 300;
    const [first, retry] = await race('adv81-slow-ok');
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), note: 'HELLO' } },
    });
    expect(retry.body).toEqual({ ...first.body, extensions: replayed });
  });

  it('a 2.5 s middleware of a live first call: the retry waits for its output', async () => {
    serviceMs = 2500;
    const [first, retry] = await race('adv81-slow-mw');
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), note: 'HELLO' } },
    });
    expect(retry.body).toEqual({ ...first.body, extensions: replayed });
  }, 20_000);
});
