import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type INestApplication, Module } from '@nestjs/common';
import {
  Args,
  Field,
  GraphQLModule,
  ID,
  Mutation,
  ObjectType,
  Parent,
  Query,
  registerEnumType,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 17: a GraphQL mutation whose object has a `@ResolveField()` that maps its
 * parent's raw database value to the field's type fails, rolls back and stores the failure.
 *
 * What the app does (Apollo on Express, TypeORM, the docs' GraphQL setup): `placeOrder(item)`
 * inserts an order and returns the row as the database gives it: `status` is the column's
 * lowercase text (`'pending'`), `id` a `bigserial` read as a `BigInt` (pg's type parser set
 * for int8, as apps with bigint ids do). The GraphQL type maps both with field resolvers, the
 * ordinary code-first way to expose a raw column: `@ResolveField(() => OrderStatus) status`
 * returns `parent.status.toUpperCase()` (an enum `PENDING | SHIPPED`), and
 * `@ResolveField(() => ID) id` returns `parent.id.toString()`. Without `@Idempotent()` (the
 * control, `placeOrderPlain`): 200, `{ id: "1", status: "PENDING" }`, the row kept.
 *
 * What happens: to store the answer, `outputWire` (lib/graphql/wire-value.ts) walks each
 * selected field and serializes the parent's *own property of that name* with the field's
 * scalar, even when the field has a `@ResolveField()` of the app's that GraphQL will call
 * instead (and that the replay runs again anyway). `OrderStatus.serialize('pending')` throws
 * ("Enum "OrderStatus" cannot represent value: "pending""), `ID.serialize(1n)` throws ("ID
 * cannot represent value: 1n"). The library takes that as "a value that cannot be stored": the
 * insert rolls back, the error is stored as the answer, and every retry replays it. The
 * mutation can never succeed under its key, and no key makes it succeed.
 *
 * What should happen (docs/guides/graphql.md, "What is stored, and replayed"): "A
 * `@ResolveField()` under the mutation ... GraphQL runs it after the mutation's transaction
 * committed ... at the first call and again at every replay", and the parent keeps "what the
 * resolvers under it read, as they first read it" (its own data, typed, under `__kept`). A
 * field that the app resolves needs no stored value of its own: it should be kept as the
 * parent's data (a `BigInt` stays a `BigInt`, as the docs promise for a Prisma model's column),
 * not run through the field's scalar. Expected: 200 `{ id: "1", status: "PENDING" }`, the row
 * kept once, the retry the same bytes with the replay marker.
 *
 * Why it matters: a correct program fails for ever because of the library, and the failure is
 * stored. Likely: mapping a raw column (a lowercase status, a bigint id, a cents integer) in a
 * `@ResolveField()` of the same name is common code-first GraphQL.
 */
enum OrderStatus {
  PENDING = 'PENDING',
  SHIPPED = 'SHIPPED',
}
registerEnumType(OrderStatus, { name: 'OrderStatus' });

/** The row as the database gives it. */
interface OrderRow {
  id: bigint;
  item: string;
  status: string;
}

@ObjectType()
class Order {
  @Field(() => ID)
  id!: string;

  @Field()
  item!: string;

  @Field(() => OrderStatus)
  status!: OrderStatus;
}

@Resolver(() => Order)
class OrdersResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async place(item: string): Promise<OrderRow> {
    const rows = (await this.dataSource.query(
      `INSERT INTO orders (item, status) VALUES ($1, 'pending') RETURNING id, item, status`,
      [item],
    )) as { id: string; item: string; status: string }[];
    return { ...rows[0], id: BigInt(rows[0].id) };
  }

  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  placeOrderPlain(@Args('item') item: string): Promise<OrderRow> {
    return this.place(item);
  }

  @Mutation(() => Order)
  @Idempotent()
  placeOrder(@Args('item') item: string): Promise<OrderRow> {
    return this.place(item);
  }

  @ResolveField(() => OrderStatus)
  status(@Parent() order: OrderRow): OrderStatus {
    return order.status.toUpperCase() as OrderStatus;
  }

  @ResolveField(() => ID)
  id(@Parent() order: OrderRow): string {
    return order.id.toString();
  }
}

describe('adversary 17: GraphQL, a @ResolveField() that maps its parent’s raw column', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv17_gql_raw_parent');
    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: true,
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      providers: [OrdersResolver],
    })
    class OrdersModule {}
    app = await bootstrapTestApp(OrdersModule, 'express');
    const dataSource = app.get<DataSource>((await import('typeorm')).DataSource);
    await dataSource.query(
      'CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL, status text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  const mutate = (field: string, item: string, key?: string, selection = '{ id item status }') => {
    const call = request(app.getHttpServer())
      .post('/graphql')
      .send({ query: `mutation { ${field}(item: "${item}") ${selection} }` });
    return key ? call.set('Idempotency-Key', key) : call;
  };

  const count = async (item: string) => {
    const dataSource = app.get<DataSource>((await import('typeorm')).DataSource);
    const rows = (await dataSource.query('SELECT 1 FROM orders WHERE item = $1', [
      item,
    ])) as unknown[];
    return rows.length;
  };

  it('without the library: the field resolvers map the row (control)', async () => {
    const answer = await mutate('placeOrderPlain', 'lamp');
    expect({
      status: answer.status,
      body: answer.body as unknown,
      rows: await count('lamp'),
    }).toEqual({
      status: 200,
      body: { data: { placeOrderPlain: { id: '1', item: 'lamp', status: 'PENDING' } } },
      rows: 1,
    });
  });

  it('under @Idempotent(): the same answer, the row kept once, replayed', async () => {
    const first = await mutate('placeOrder', 'desk', 'order-1');
    const retry = await mutate('placeOrder', 'desk', 'order-1');
    // Observed: first and retry `{ data: null, errors: [{ message: 'ID cannot represent
    // value: 2' ... }] }` (the retry's replayed), rows: 0 (rolled back, the error stored).
    expect({
      first: first.body as unknown,
      retry: (retry.body as { data?: unknown }).data,
      rows: await count('desk'),
    }).toEqual({
      first: { data: { placeOrder: { id: '2', item: 'desk', status: 'PENDING' } } },
      retry: { placeOrder: { id: '2', item: 'desk', status: 'PENDING' } },
      rows: 1,
    });
  });

  it('under @Idempotent(), the enum alone ({ item status }): the same', async () => {
    const first = await mutate('placeOrder', 'chair', 'order-2', '{ item status }');
    const retry = await mutate('placeOrder', 'chair', 'order-2', '{ item status }');
    // Observed: first and retry `{ data: null, errors: [{ message: 'Enum "OrderStatus" cannot
    // represent value: "pending"' ... }] }`, rows: 0.
    expect({
      first: first.body as unknown,
      retry: (retry.body as { data?: unknown }).data,
      rows: await count('chair'),
    }).toEqual({
      first: { data: { placeOrder: { item: 'chair', status: 'PENDING' } } },
      retry: { placeOrder: { item: 'chair', status: 'PENDING' } },
      rows: 1,
    });
  });
});
