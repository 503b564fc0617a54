import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 86 (graphql): a `@ResolveField()` whose parent sits inside a field-middleware
 * output, the parent an entity with a large column no client selects (a customer's
 * `biography`, 300 kB of text). The first answer is a few hundred bytes; the library keeps the
 * parent's whole own data with the outputs (`StoredOutputs.parents`), which takes the stored
 * answer past `maxResponseBytes` (1 MiB by default; 256 kB here), so the outputs are not
 * stored at all: every replay answers `data: null` (the non-null `customer` nulls the
 * non-null `createOrder`) with `field_output_pending`, where the first answer gave the order.
 *
 * User code: `Order.customer: Customer` behind Nest's field middleware `visible`; a
 * `@ResolveField() greeting(@Parent() customer)` on `Customer` reading `customer.name`;
 * `createOrder` with `@Idempotent()` returning the customer row with its `biography` column;
 * Apollo on Express.
 *
 * Code path: lib/graphql/middleware-outputs.ts (the app field's wrapper) -> `noteAppParent`
 * -> lib/graphql/app-parents.ts `keptParent(source)` keeps every own data property of the
 * parent (selected or not, read or not by the resolver), stored with the outputs; the size
 * check (lib/graphql/output-paths.ts / run-field.ts, `maxResponseBytes`) then drops the
 * outputs.
 *
 * Docs (docs/guides/graphql.md): "an unselected large field does not count against
 * `maxResponseBytes`"; "A `@ResolveField()` under a middleware field of object type reads, on a
 * replay, a parent rebuilt from the answer with the own data it had at the first answer";
 * replays return the first answer byte for byte.
 *
 * Severity: medium-high: a committed order's replay answers `data: null` (its id lost too; an
 * error telling the client to read the field with a query) because of a column the client never asked for;
 * nothing in the first answer (a few hundred bytes) hints that it is too large to store.
 *
 * Fails now: replay `{ data: null, errors: [field_output_pending at createOrder.customer] }`
 * ("... or the output was over the mutation's maxResponseBytes ..."), first answer
 * `{ data: { createOrder: { id, customer: { name, greeting } } } }`.
 * Control (passes): the same app and operation where the row's `biography` is short.
 *
 * Suggested fix: keep only what the app's resolver can read that the answer does not hold,
 * bounded (or keep the parent's data per field, not counting against the answer), or when
 * kept parents would overflow, store the outputs without them (the replay's parent rebuilt
 * from the answer only, as before) rather than dropping the outputs.
 *
 * Fixed (session of 2026-12-06, third): where the kept parents take the completed answer past
 * `maxResponseBytes`, the largest parents' data is left out (as few as bring it under:
 * lib/graphql/parents-within.ts `parentsWithin`, table-driven spec beside it) and the outputs
 * are stored without them, with a warning in the app's log (lib/graphql/run-field.ts, the
 * answer hook's `completing`); only where the outputs themselves are too large are they
 * dropped. The replay's parent is rebuilt from the answer (`name` selected): `Hello Ada`.
 * Docs: docs/guides/graphql.md, "Field middleware".
 */
let pool: Pool;
let biography = 'short';

/** Nest's field middleware: the customer as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const customer = (await next()) as Customer;
  return { ...customer };
};

@ObjectType()
class Customer {
  @Field()
  name!: string;

  /** A column of the entity, not in the schema. */
  biography?: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Customer, { middleware: [visible] })
  customer!: Customer;
}

@Resolver(() => Customer)
class CustomerResolver {
  @ResolveField(() => String)
  greeting(@Parent() customer: Customer): string {
    return `Hello ${customer.name}`;
  }
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, customer: { name: 'Ada', biography } };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, maxResponseBytes: 256 * 1024 }),
    }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [OrdersResolver, CustomerResolver],
})
class OrdersModule {}

describe('adversary 86: an app field under a middleware output, its parent with a large column', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv86_gql_mw_parent_large', {
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

  const QUERY = 'mutation { createOrder { id customer { name greeting } } }';

  const orders = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders')).rows[0].n;

  const replayOf = async (key: string) => {
    const before = await orders();
    const firstAnswer = await post(key, QUERY);
    expect(firstAnswer.body).toEqual({
      data: {
        createOrder: { id: expect.any(Number), customer: { name: 'Ada', greeting: 'Hello Ada' } },
      },
    });
    const again = await post(key, QUERY);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
    expect(await orders()).toBe(before + 1);
  };

  it('control: the row with a short biography: the replay is the first answer', async () => {
    biography = 'short';
    await replayOf('adv86-parent-short');
  });

  it('the row with a large unselected biography: the replay is the first answer', async () => {
    biography = 'x'.repeat(300 * 1024);
    await replayOf('adv86-parent-large');
  });
});
