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
 * Adversary 81 (graphql): under a middleware field of object type, a retry that selects a
 * subfield without the first call's alias (or under another one) is answered null: on a
 * non-null subfield, "Cannot return null for non-nullable field", which nulls the whole
 * mutation's answer, though the first call selected that field.
 *
 * The app: `Order { id shipping: Address! }`, `Address { street: String! }`, `shipping`
 * behind Nest's field middleware `audit` (an access check or a log that passes the value on:
 * `return next()`; or the global `fieldMiddleware`, Nest's `loggerMiddleware` recipe);
 * `createOrder` with `@Idempotent()`; Apollo on Express. The first call selects
 * `shipping { line1: street }`, the retry `shipping { street }` (another client build, a
 * generated query).
 *
 * Why: a replayed middleware field's output is rebuilt by `outputValue`
 * (lib/graphql/middleware-outputs.ts), which looks each selected subfield up in the stored
 * output by the *retry's* response key only (`fieldNodes.find((each) => (each.alias?.value ??
 * name) in stored)`); the stored output holds `line1`, so `street` is left out, and GraphQL's
 * default resolver reads undefined. The named keys (`names`, lib/graphql/named-path.ts) serve
 * only the middleware field itself, not the fields inside its output.
 *
 * Docs (docs/guides/graphql.md): "A retry that selects such a field under another alias (or
 * without the first call's alias) gets the first call's output of it"; "a retry may select the
 * first call's fields under other aliases or through fragments, or fewer of them, and gets the
 * stored values"; "Each output comes back on a replay with ... its objects as plain objects
 * of their selected fields".
 *
 * Control (passes): the retry with the first call's alias (`shipping { line1: street }`).
 *
 * Severity: high (an honest retry of a committed order gets `createOrder: null` and an
 * INTERNAL_SERVER_ERROR; a client that retries on that error retries for ever, or with a new
 * key, which places the order again; on a nullable subfield, a made-up null).
 *
 * Fails now: `{ data: { createOrder: null }, errors: [{ message: 'Cannot return null for
 * non-nullable field Address.street.', path: ['createOrder', 'shipping', 'street'] }] }`.
 *
 * Suggested fix: in `outputValue`, find a selected subfield in the stored output by its field
 * name (and arguments) as well: store the output's response keys with their field names (as
 * `names` does for the middleware fields), or keep the first call's selection, and read the
 * stored key that answered the same field.
 *
 * Fixed: the first answer stores the named keys of the fields inside each middleware output too
 * (`namesInside`, lib/graphql/output-names.ts, into `names`); `outputValue` finds each selected
 * subfield by its named key first (`storedSubkey`, lib/graphql/middleware-outputs.ts).
 */
let pool: Pool;

/** Nest's field middleware that passes the value on (an access check, a log). */
const audit: FieldMiddleware = async (_ctx, next) => next();

@ObjectType()
class Address {
  @Field()
  street!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Address, { middleware: [audit] })
  shipping!: Address;
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
    return { id: rows[0].id, shipping: { street: 'Main St 1' } };
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

describe('adversary 81: an alias inside a middleware field of object type', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_object_alias', {
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

  it("control: the retry with the first call's alias", async () => {
    const query = 'mutation { createOrder { id shipping { line1: street } } }';
    const first = await post('adv81-obj-alias-ok', query);
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), shipping: { line1: 'Main St 1' } } },
    });
    const again = await post('adv81-obj-alias-ok', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it("the retry without the first call's alias: the stored street", async () => {
    const first = await post(
      'adv81-obj-alias-mw',
      'mutation { createOrder { id shipping { line1: street } } }',
    );
    expect(first.body.errors).toBeUndefined();
    const again = await post(
      'adv81-obj-alias-mw',
      'mutation { createOrder { id shipping { street } } }',
    );
    // Fails: createOrder null, "Cannot return null for non-nullable field Address.street."
    expect(again.body).toEqual({
      data: {
        createOrder: { id: first.body.data.createOrder.id, shipping: { street: 'Main St 1' } },
      },
      extensions: replayed,
    });
  });
});
