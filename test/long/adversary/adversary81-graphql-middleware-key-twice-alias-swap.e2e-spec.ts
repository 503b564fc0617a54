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
 * Adversary 81 (graphql): the same key twice in one operation, the second call selecting the
 * first call's middleware fields under each other's aliases, answers each one the other's
 * middleware result: `a: createOrder(idempotencyKey: "K") { x: name y: note }` and
 * `b: createOrder(idempotencyKey: "K") { x: note y: name }` answer `b.x` with the name.
 *
 * The app: `Order { id name note }`, both behind Nest's field middleware `upper`;
 * `createOrder(idempotencyKey)` with `@Idempotent({ keyFrom: { arg: 'idempotencyKey' } })`;
 * Apollo on Express. A client that batches its retries into one operation (or a form that
 * sends the order and its confirmation view together) selects the fields in another order.
 *
 * Why: `sharedAt` (lib/graphql/output-paths.ts) answers a replay in the first answer's own
 * operation by the response key first (`first.results.has(key)`), and by the named key only
 * where that response key had no result: `x` had one (the first call's `name`), so `b.x`
 * (`note`) gets it. The same order as `outputAt` for stored outputs.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "The key met again in the operation whose
 * answer stores the outputs (the key twice in one operation) waits for nothing: its middleware
 * fields answer what the first call's middleware gave"; "A retry that selects such a field
 * under another alias ... gets the first call's output of it".
 *
 * Control (passes): the second call with the first call's aliases answers the same values.
 *
 * Severity: medium (a field answers another field's value, with no error).
 *
 * Fails now: `b: { x: 'FIRST NAME', y: 'A NOTE' }` for `b { x: note y: name }`.
 *
 * Suggested fix: in `sharedAt` (and `outputAt`), look the field up by its named key first,
 * and by its response key only where the named key is not known.
 *
 * Fixed: `sharedAt` finds the first answer's result by named key first, through the same
 * `storedKeyFor` (lib/graphql/output-paths.ts), reading each result's own named key.
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
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  async createOrder(@Args('idempotencyKey') _key: string): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, name: 'first name', note: 'a note' };
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

describe('adversary 81: the key twice in one operation, aliases swapped', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_twice_swap', {
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
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  it("control: the second call with the first call's aliases", async () => {
    const res = await post(
      'mutation { a: createOrder(idempotencyKey: "adv81-twice-ok") { x: name y: note } ' +
        'b: createOrder(idempotencyKey: "adv81-twice-ok") { x: name y: note } }',
    );
    expect(res.body).toEqual({
      data: { a: { x: 'FIRST NAME', y: 'A NOTE' }, b: { x: 'FIRST NAME', y: 'A NOTE' } },
      extensions: { idempotency: { replayed: ['b'] } },
    });
  });

  it("the second call's aliases swapped: each field its own result", async () => {
    const res = await post(
      'mutation { a: createOrder(idempotencyKey: "adv81-twice-mw") { x: name y: note } ' +
        'b: createOrder(idempotencyKey: "adv81-twice-mw") { x: note y: name } }',
    );
    // Fails: b is { x: 'FIRST NAME', y: 'A NOTE' }.
    expect(res.body).toEqual({
      data: { a: { x: 'FIRST NAME', y: 'A NOTE' }, b: { x: 'A NOTE', y: 'FIRST NAME' } },
      extensions: { idempotency: { replayed: ['b'] } },
    });
  });
});
