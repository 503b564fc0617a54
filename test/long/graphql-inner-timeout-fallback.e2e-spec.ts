import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  type CallHandler,
  ConflictException,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  Module,
  type NestInterceptor,
  UseInterceptors,
} from '@nestjs/common';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { type Observable, of, timeout } from 'rxjs';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../lib/index.js';
import { bootstrapTestApp } from '../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

/**
 * GraphQL, round 43a's second break on a field: rxjs' fallback form of `timeout()` (`with: ()
 * => of(...)`, "answer accepted if the work is slow") written above `@Idempotent()` on a
 * mutation, so that it runs inside the library's interceptor. Its value is not the resolver's:
 * it is the field's answer, not stored; the resolver goes on in its transaction and commits
 * with its own answer (the retry replays that), or rolls back on its error, stored as the
 * field's answer as under an outer timeout. The same interceptor written under `@Idempotent()` (outside it) is the control.
 */
let runs = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout({ first: 400, with: () => of({ item: 'accepted' }) }));
  }
}

@ObjectType()
class Order {
  @Field()
  item!: string;
}

@Resolver(() => Order)
class OrdersResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async place(item: string): Promise<Order> {
    await this.dataSource.query('INSERT INTO orders (item, step) VALUES ($1, 1)', [item]);
    await sleep(800); // the payment provider, slow this time
    if (item.startsWith('declined')) throw new ConflictException('card declined');
    await this.dataSource.query('INSERT INTO orders (item, step) VALUES ($1, 2)', [item]);
    runs += 1;
    return { item };
  }

  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  placeInner(@Args('item') item: string): Promise<Order> {
    return this.place(item);
  }

  @Mutation(() => Order)
  @Idempotent()
  @UseInterceptors(TimeoutInterceptor)
  placeOuter(@Args('item') item: string): Promise<Order> {
    return this.place(item);
  }
}

describe('GraphQL: a timeout with a fallback value inside @Idempotent()', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('gql_inner_fallback');
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
      providers: [OrdersResolver, TimeoutInterceptor],
    })
    class OrdersModule {}
    app = await bootstrapTestApp(OrdersModule, 'express');
    await app.get(DataSource).query('CREATE TABLE orders (item text NOT NULL, step int NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  const mutate = (field: string, item: string, key: string) =>
    request(app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ query: `mutation { ${field}(item: "${item}") { item } }` });

  const steps = async (item: string) =>
    (
      (await app
        .get(DataSource)
        .query('SELECT step FROM orders WHERE item = $1 ORDER BY step', [item])) as {
        step: number;
      }[]
    ).map((row) => row.step);

  const shape = (body: unknown, field: string) => {
    const { data, errors } = body as {
      data: Record<string, unknown> | null;
      errors?: { extensions?: { status?: number; code?: string } }[];
    };
    return {
      data: data?.[field] ?? null,
      error: errors?.[0]?.extensions?.status ?? errors?.[0]?.extensions?.code ?? null,
    };
  };

  it.each([
    ['placeOuter', 'written under @Idempotent() (outside it): control'],
    ['placeInner', 'written above @Idempotent() (inside it)'],
  ])(
    '%s, %s: the fallback goes out unstored; the retry replays the order, placed once',
    async (field) => {
      runs = 0;
      const first = await mutate(field, field, `fallback-${field}`);
      await sleep(1_200); // the resolver settles meanwhile
      const retry = await mutate(field, field, `fallback-${field}`);
      expect({
        first: shape(first.body, field),
        retry: shape(retry.body, field),
        replayed: retry.headers['idempotent-replayed'] ?? null,
        steps: await steps(field),
        runs,
      }).toEqual({
        first: { data: { item: 'accepted' }, error: null },
        retry: { data: { item: field }, error: null },
        replayed: null,
        steps: [1, 2],
        runs: 1,
      });
    },
    20_000,
  );

  it.each([
    ['placeOuter', 'written under @Idempotent() (outside it): control'],
    ['placeInner', 'written above @Idempotent() (inside it)'],
  ])(
    '%s, %s: declined after the fallback went out: rolled back, the decline stored',
    async (field) => {
      runs = 0;
      const item = `declined-${field}`;
      const first = await mutate(field, item, `declined-${field}`);
      await sleep(1_200);
      expect(await steps(item)).toEqual([]);
      const retry = await mutate(field, item, `declined-${field}`);
      expect({ first: shape(first.body, field), retry: shape(retry.body, field) }).toEqual({
        first: { data: { item: 'accepted' }, error: null },
        // The resolver's own error is its answer on a field, as under an outer timeout.
        retry: { data: null, error: 409 },
      });
    },
    20_000,
  );
});
