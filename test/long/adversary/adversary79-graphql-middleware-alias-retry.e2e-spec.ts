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
 * Adversary 79 (graphql): a retry that selects a middleware field under another alias (or the
 * field itself where the first call aliased it) is refused on that field with
 * `field_not_stored` ("was not selected by the first call"), although the first call
 * selected it and the docs say a retry may select the first call's fields under other
 * aliases.
 *
 * The app: `Order { id tags: [String!] }`, `tags` behind Nest's field middleware `upper`
 * (`(await next()).map((t) => t.toUpperCase())`); `createOrder` with `@Idempotent()`; Apollo
 * on Express. The first call selects `{ id tags }`; its retry (another client build, a
 * generated query with aliases, Apollo Client's normalised copy) selects
 * `{ id colours: tags }`.
 *
 * Why: the outputs are stored by their path of response keys under the mutation's field
 * (`outputsIn` / `relativeKey`, lib/graphql/output-paths.ts: `tags`); the replay's wrapper
 * (`answerOutputsOf`, lib/graphql/middleware-outputs.ts) looks its own path up (`colours`),
 * finds no output there (`outputAt` -> `unstored`) and throws `notStoredField`. The mutation's
 * own stored value is read by field names (aliases allowed); the outputs are not.
 *
 * Docs (docs/guides/graphql.md, on the fingerprint): "a retry may select the first call's
 * fields under other aliases or through fragments, or fewer of them, and gets the stored
 * values; a field the first call did not select is refused on that field".
 *
 * Controls (pass): the retry with the same selection is replayed whole; the same alias change
 * on a field without middleware (`id` as `orderId`) is replayed.
 *
 * Severity: medium (an honest retry that renamed its alias is told it selected a field the
 * first call did not select, and to use a new key: following that advice runs the order
 * again).
 *
 * Fails now: the retry answers `colours: null` with the error "The field Order.tags was not
 * selected by the first call with this idempotency key ..." (`field_not_stored`).
 *
 * Suggested fix: store each output by a path of field names plus the field's arguments (the
 * way the selection is merged), or by the response key and its field name, and look a
 * replay's field up by its field name and arguments under each list index and parent, not
 * by its alias; where two aliases of one field with the same arguments were selected, either
 * is the output.
 *
 * Fixed: each output is stored with its named key too (field names and arguments, by the
 * operation's selection: lib/graphql/named-path.ts; `StoredOutputs.names`,
 * lib/graphql/output-paths.ts), and a replay's field whose response-key path has no output
 * is looked up by its own named key (`outputAt`).
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
    return { id: rows[0].id, tags: ['red', 'green'] };
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

describe('adversary 79: a retry that selects a middleware field under another alias', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv79_gql_mw_alias_retry', {
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

  it('control: the same selection, and an alias on a field without middleware', async () => {
    const first = await post('adv79-alias-ok', 'mutation { createOrder { id tags } }');
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), tags: ['RED', 'GREEN'] } },
    });
    const same = await post('adv79-alias-ok', 'mutation { createOrder { id tags } }');
    expect(same.body).toEqual({ ...first.body, extensions: replayed });
    const aliased = await post('adv79-alias-ok', 'mutation { createOrder { orderId: id } }');
    expect(aliased.body).toEqual({
      data: { createOrder: { orderId: first.body.data.createOrder.id } },
      extensions: replayed,
    });
  });

  it('the middleware field under another alias: replayed with its stored output', async () => {
    const first = await post('adv79-alias-mw', 'mutation { createOrder { id tags } }');
    expect(first.body.errors).toBeUndefined();
    const again = await post('adv79-alias-mw', 'mutation { createOrder { id colours: tags } }');
    // Fails: colours null with field_not_stored ("was not selected by the first call").
    expect(again.body).toEqual({
      data: { createOrder: { id: first.body.data.createOrder.id, colours: ['RED', 'GREEN'] } },
      extensions: replayed,
    });
  });
});
