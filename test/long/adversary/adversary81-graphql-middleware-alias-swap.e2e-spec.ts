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
 * Adversary 81 (graphql): a retry that gives two middleware fields each other's aliases is
 * answered each one's output under the other field: `{ a: name b: note }` first, then
 * `{ a: note b: name }` replays `a` (now `note`) with the stored `name`, and `b` with `note`.
 *
 * The app: `Order { id name note }`, both behind Nest's field middleware `upper`
 * (`String(await next()).toUpperCase()`; or the global `buildSchemaOptions.fieldMiddleware`,
 * which puts it on every field); `createOrder` with `@Idempotent()`; Apollo on Express. A
 * client whose generated operation names its aliases by position (`a`, `b`; a code generator,
 * a batched client, a form that lists fields in another order after a deploy) retries with the
 * same aliases on other fields.
 *
 * Why: `outputAt` (lib/graphql/output-paths.ts) looks a replayed field up by its response-key
 * path first (`Object.prototype.hasOwnProperty.call(outputs, key)`), and only where that
 * response key has no output by its named key (field name and arguments, `names`). `a` has an
 * output (the first call's `name`), so the retry's `a: note` answers it; its named key
 * (`note`) is never read. The mutation's own stored value is read by field names: the same
 * swap on fields without middleware (`x: id y: code`) is replayed right.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A retry that selects such a field under
 * another alias (or without the first call's alias) gets the first call's output of it:
 * outputs are found by their fields' names and arguments too, as the mutation's own values
 * are." And the promise: "replays answer the stored answer".
 *
 * Controls (pass): the same swap on fields without middleware; the retry with the first
 * call's aliases.
 *
 * Severity: high (a replay answers a field with another field's value, no error: a client
 * reads the order's note as its name; with fields of other types, a scalar of the wrong type).
 *
 * Fails now: the retry answers `{ a: 'FIRST NAME', b: 'A NOTE' }` for `{ a: note b: name }`
 * (the values of the first call's `a` and `b`, not of the fields now selected).
 *
 * Suggested fix: look a replayed middleware field up by its named key first (field names and
 * arguments at each step, `names`), and by its response-key path only where the named key is
 * not known (an output stored before `names`), or check that the response key's stored output
 * is of the same named key before answering it.
 *
 * Fixed: a replayed middleware field is found by its named key first (field name and arguments), by
 * its response key only where the first answer knew that key as the same field or could not name it
 * (`storedKeyFor`, lib/graphql/output-paths.ts).
 */
let pool: Pool;

/** Nest's field middleware: the text in capitals. */
const upper: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string | null;
  return value === null ? null : value.toUpperCase();
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field()
  code!: string;

  @Field({ middleware: [upper] })
  name!: string;

  @Field({ middleware: [upper] })
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
    return { id: rows[0].id, code: 'c-1', name: 'first name', note: 'a note' };
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

describe('adversary 81: a retry that swaps the aliases of two middleware fields', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_alias_swap', {
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

  it('control: the swap on fields without middleware, and the same aliases', async () => {
    const first = await post('adv81-swap-ok', 'mutation { createOrder { x: id y: code a: name } }');
    expect(first.body).toEqual({
      data: { createOrder: { x: expect.any(Number), y: 'c-1', a: 'FIRST NAME' } },
    });
    const same = await post('adv81-swap-ok', 'mutation { createOrder { x: id y: code a: name } }');
    expect(same.body).toEqual({ ...first.body, extensions: replayed });
    const swapped = await post('adv81-swap-ok', 'mutation { createOrder { x: code y: id } }');
    expect(swapped.body).toEqual({
      data: { createOrder: { x: 'c-1', y: first.body.data.createOrder.x } },
      extensions: replayed,
    });
    const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders');
    expect(rows[0].n).toBe(1);
  });

  it("the middleware fields under each other's aliases: each its own output", async () => {
    const first = await post('adv81-swap-mw', 'mutation { createOrder { id a: name b: note } }');
    expect(first.body).toEqual({
      data: { createOrder: { id: expect.any(Number), a: 'FIRST NAME', b: 'A NOTE' } },
    });
    const again = await post('adv81-swap-mw', 'mutation { createOrder { id a: note b: name } }');
    // Fails: a: 'FIRST NAME', b: 'A NOTE' (the outputs of the first call's response keys).
    expect(again.body).toEqual({
      data: { createOrder: { id: first.body.data.createOrder.id, a: 'A NOTE', b: 'FIRST NAME' } },
      extensions: replayed,
    });
  });
});
